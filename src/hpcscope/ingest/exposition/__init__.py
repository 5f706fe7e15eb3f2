"""The Prometheus text exposition format: parser, scraper and scrape targets."""
