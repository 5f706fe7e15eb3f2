"""PyTorch profiler (Kineto) traces -> columnar event tables."""
