"""Views of simulated runs: execution profile, timeline and tables built from traces."""
