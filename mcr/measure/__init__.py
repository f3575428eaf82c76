"""mcr's measurement engine (engine) and the collectives it measures (cases)."""
