"""The capstone training-ingest lab: workload, probes, buffer model and runner."""
