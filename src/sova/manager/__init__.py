"""The cluster manager: Monitor, Analyse, Plan and Knowledge of Sova's MAPE-K loop."""
