"""Multi-process (torchrun) work: distributed diagnosis, communication ceilings, projection."""
