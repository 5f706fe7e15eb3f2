"""The straggler simulator's models: step model, Monte Carlo, AllReduce cost, calibration."""
