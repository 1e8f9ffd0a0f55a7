"""Widget keys and query parameters of the teaching views (step explanation, runtime-model
playground, line provenance): named once, shared by the pages and the tests."""

QP_STEP = "step"  # explain?run=RUN&step=N

# explain page
EXPLAIN_PICK_STEP = "explain_pick_step"
EXPLAIN_RUN_ONE = "explain_run_one_step"
EXPLAIN_WAITING = "_explain_waiting_for_step"  # session state: (run id, step index) asked for

# playground page
PLAY_P = "play_parents"
PLAY_K = "play_proposals_per_parent"
PLAY_W = "play_workers"
PLAY_LM = "play_lm_seconds"
PLAY_SPREAD = "play_lm_spread"
PLAY_EVAL = "play_eval_seconds"
PLAY_ACCEPT = "play_acceptance"
PLAY_VAL = "play_validation_size"
PLAY_MINIBATCH = "play_minibatch"
PLAY_BUDGET = "play_budget"

# candidate page: who wrote each line
BLAME_COMPONENT = "blame_component"
