from .synthetic import SimResult, SimTruth, simulate

__all__ = ["SimResult", "SimTruth", "simulate"]
