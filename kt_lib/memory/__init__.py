"""Memory banks of historical (training) students for SimAKT's inter-student heads."""
