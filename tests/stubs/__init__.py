"""Local fakes of external services, shared by tests and benchmarks."""
