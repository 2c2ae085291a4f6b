"""Local solvers, aggregators and server optimizers."""
