"""Collection: scrape exporters, read spools, poll the scheduler, attribute samples to jobs."""
