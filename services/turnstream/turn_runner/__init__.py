"""turn-runner: the one decider per session; walks each turn through its stages."""
