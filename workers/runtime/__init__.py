"""Running a worker as a service: the process entry point, probes, start-up errors and log output."""
