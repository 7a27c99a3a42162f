"""samelang bench: speed and scale measurements, never part of the default test run."""
