"""Widget and session-state keys: named once, shared by pages and tests (tests find widgets by key)."""

# sidebar
WHO = "who_am_i"
WHO_KEPT = "_who_am_i_kept"  # the name outside the widget (widget state can be dropped on a page switch)
WHO_SAVED = "_who_saved_cookie"
COOKIE_WHO = "refract_user"
SIGN_IN = "sign_in"
COOKIE_NEXT = "refract_next"  # the page someone not yet signed in was opening
NEXT_FOLLOWED = "_next_followed"
SIGN_OUT = "sign_out"

# query parameters (shareable links)
QP_RUN = "run"
LAST_RUN = "_last_run"  # the run this browser session opened last: the sidebar's pages open it
QP_CANDIDATE = "candidate"

# runs page
RUNS_STATUS = "runs_status_filter"
RUNS_OWNER = "runs_owner_filter"
RUNS_SEARCH = "runs_search"
RUNS_TABLE = "runs_table"
RUNS_COMPARE = "runs_compare"
RUNS_DUPLICATE = "runs_duplicate"
RUNS_OPEN = "runs_open"
RUNS_EXAMPLE = "runs_example_{slug}"  # the empty Runs page: open a built-in example in the form

# dashboard
DASH_RUN = "dash_run_select"
DASH_STATUS = "dash_cand_status"
DASH_ORIGIN = "dash_cand_origin"
DASH_STEPS = "dash_cand_steps"
DASH_SORT = "dash_cand_sort"
DASH_TABLE = "dash_cand_table"
DASH_PAGE = "dash_cand_page"
DASH_STEPS_PAGE = "dash_steps_page"  # the Steps table's page (ui.paging)
LOG_STEPS_PAGE = "log_steps_page"  # the command log's steps, a page at a time
DASH_CHART_X = "dash_chart_x"
DASH_HEATMAP_ALL = "dash_heatmap_all"
DASH_OBJECTIVES_ON = "dash_objectives_on"
DASH_OBJ_X = "dash_obj_x"
DASH_OBJ_Y = "dash_obj_y"
DASH_FRONTIER_CHART = "dash_frontier_chart"
DASH_TIMELINE_STEPS = "dash_timeline_steps"

# candidate page
CAND_SELECT = "cand_select"
CAND_EXAMPLE_FILTER = "cand_example_filter"
CAND_ANSWERS_PARENT = "cand_answers_parent"  # a merge: which parent its answers are set against

# lineage page
LIN_SHOW_REJECTED = "lin_show_rejected"
LIN_CHART = "lin_chart"
LIN_COLOR = "lin_color"

# new run page: every field of the draft (their values are the draft, autosaved)
NEW_TEMPLATE = "new_template"
NEW_LOAD_TEMPLATE = "new_load_template"
NEW_TOML = "new_toml_upload"
NEW_NAME = "new_name"
NEW_OBJECTIVE = "new_objective"
NEW_BACKGROUND = "new_background"
NEW_KIND = "new_artifact_kind"
NEW_SEED_MODE = "new_seed_mode"
NEW_SEED_TEXT = "new_seed_text"
NEW_COMPONENTS = "new_components"  # a list of {"name", "text"} dicts (not a widget)
NEW_COMP_NAME = "new_comp_name_{i}"
NEW_COMP_TEXT = "new_comp_text_{i}"
NEW_COMP_ADD = "new_comp_add"
NEW_COMP_DEL = "new_comp_del_{i}"
NEW_EVALUATOR = "new_evaluator"
NEW_EVALUATOR_ACE = "new_evaluator_ace"
NEW_DATA_SOURCE = "new_data_source"
NEW_DATA_UPLOAD = "new_data_upload"
NEW_DATA_TEXT = "new_data_text"  # the whole dataset, or the training set with separate splits
NEW_DATA_VAL_TEXT = "new_data_val_text"
NEW_DATA_TEST_TEXT = "new_data_test_text"
NEW_DATA_FORMAT = "new_data_format"
NEW_SPLIT_VAL = "new_split_val"
NEW_SPLIT_TEST = "new_split_test"
NEW_SPLIT_SEED = "new_split_seed"
NEW_MODEL = "new_model"
NEW_API_BASE = "new_api_base"
NEW_API_KEY_ENV = "new_api_key_env"
NEW_TEMPERATURE = "new_temperature"
NEW_TEST_LM = "new_test_lm"
NEW_P = "new_parents_per_step"
NEW_K = "new_proposals_per_parent"
NEW_WORKERS = "new_workers"
NEW_MINIBATCH = "new_minibatch"
NEW_SELECTION = "new_selection"
NEW_ACCEPT = "new_accept"
NEW_MERGE = "new_merge"
NEW_MERGE_SIBLINGS = "new_merge_siblings"
NEW_SCHEDULE = "new_schedule"
NEW_DOWNLOAD = "new_download_toml"
NEW_CARRIED = "new_carried"  # settings the form has no field for (ui.form_carry)
NEW_MAX_CALLS = "new_max_metric_calls"
NEW_MAX_COST = "new_max_cost"
NEW_MAX_SECONDS = "new_max_seconds"
NEW_STOP_SCORE = "new_stop_at_score"
NEW_TRY = "new_try_evaluator"
NEW_VALIDATE = "new_validate"
NEW_SUBMIT = "new_submit"
NEW_RESET = "new_reset"
NEW_ERRORS = "_new_errors"  # {field: [reasons]} from the last validation
NEW_TRY_RESULT = "_new_try_result"  # the id of the last "try evaluator" job
NEW_LM_RESULT = "_new_lm_result"  # the id of the last "test connection" job
NEW_DRAFT_LOADED = "_new_draft_loaded"
NEW_OPEN_EXAMPLE = "_new_open_example"  # a built-in example to load on arrival (the empty Runs page)
NEW_LOADED = "_new_loaded"  # the built-in example last loaded into the form, for the note above it
NEW_PREFILL = "_new_prefill"  # a config dict to load into the form on the next run (duplicate / template)

# steering (issue 5): run controls on the dashboard
RUN_PAUSE = "steer_pause"
RUN_RESUME = "steer_resume"
RUN_STEP = "steer_step"
RUN_STOP = "steer_stop"
RUN_STOP_CONFIRM = "steer_stop_confirm"
RUN_STOP_REASON = "steer_stop_reason"
RUN_STOP_CANCEL = "steer_stop_cancel"
RUN_REASON = "steer_run_reason"
RUN_BUDGET_FIELD = "steer_budget_{run}_{name}"  # one number input per budget field
RUN_BUDGET_SEND = "steer_budget_send"
RUN_OUTCOME = "_steer_run_outcome_{run}"  # the last Outcome of this session's run command
RUN_LM_FIELD = "steer_lm_{run}_{section}_{name}"  # a paused run's LM settings (model, api_base, api_key_env)
RUN_LM_SEND = "steer_lm_send"
DEGENERATE_VETO = "steer_degenerate_veto_{cand}"

# steering: candidate page
CAND_PIN = "steer_pin"
CAND_VETO = "steer_veto"
CAND_REASON = "steer_cand_reason"
CAND_OUTCOME = "_steer_cand_outcome_{cand}"
EDIT_TEXT = "steer_edit_{cand}_{i}"  # one text area per component
EDIT_REASON = "steer_edit_reason_{cand}"
EDIT_SEND = "steer_edit_send"
EDIT_RESET = "steer_edit_reset"
EDIT_CONTINUE = "steer_edit_continue"
EDIT_OUTCOME = "_steer_edit_outcome_{cand}"
INJECT_TEXT = "steer_inject_{run}_{i}"
INJECT_REASON = "steer_inject_reason_{run}"
INJECT_SEND = "steer_inject_send"
INJECT_OUTCOME = "_steer_inject_outcome_{run}"
FEEDBACK_TEXT = "steer_feedback_{cand}"
FEEDBACK_SEND = "steer_feedback_send"
FEEDBACK_OUTCOME = "_steer_feedback_outcome_{cand}"
COMMENT_TEXT = "steer_comment_{cand}"
COMMENT_SEND = "steer_comment_send"
COMMENT_OUTCOME = "_steer_comment_outcome_{cand}"

# new run: the prompt path (a [prompt_evaluator] instead of Python)
NEW_EVAL_KIND = "new_evaluator_kind"  # "code" | "prompt"
NEW_PROMPT_SYSTEM = "new_prompt_system"
NEW_PROMPT_USER = "new_prompt_user"
NEW_PROMPT_ASSERTS = "new_prompt_assertions"  # a list of {"type", "value", "weight"} dicts (not a widget)
NEW_PROMPT_EDITOR = "new_prompt_assertions_editor"  # + "_{version}": the assertions table
NEW_TASK_MODEL = "new_task_model"
NEW_TASK_SAME = "new_task_same"  # the task LM is the reflection LM (no [task_lm] table)
NEW_TASK_API_BASE = "new_task_api_base"
NEW_TASK_API_KEY_ENV = "new_task_api_key_env"
NEW_TEST_TASK_LM = "new_test_task_lm"
NEW_JUDGE_SAME = "new_judge_same"  # the judge of llm_rubric is the reflection LM (no [judge_lm] table)
NEW_JUDGE_MODEL = "new_judge_model"
NEW_JUDGE_API_BASE = "new_judge_api_base"
NEW_JUDGE_API_KEY_ENV = "new_judge_api_key_env"
NEW_TEST_JUDGE_LM = "new_test_judge_lm"
NEW_JUDGE_LM_RESULT = "_new_judge_lm_result"
NEW_START_CHECK = "_new_start_check"  # Start: {"job", "config"} while the run's LMs are asked (ui.start)
NEW_HELD_ERRORS = "_new_held_errors"  # Start's refusals {"config", "errors"}: kept while the config is unchanged
NEW_PREVIEW = "new_prompt_preview"
NEW_SHOW_SOURCE = "new_prompt_show_source"
NEW_EJECT = "new_prompt_eject"

# compare two candidates of a run
CMP_A = "cmp_candidate_a"
CMP_B = "cmp_candidate_b"
CMP_SPLIT = "cmp_split"
NEW_TASK_LM_RESULT = "_new_task_lm_result"  # the id of the last task-model "test connection" job
NEW_PROMPT_BASE = "_new_prompt_assertions_base"  # the rows the assertions table started from

# review: approval, the report, the activity feed
APPROVE_REASON = "approve_reason_{cand}"
APPROVE_SEND = "approve_send_{cand}"
APPROVE_OUTCOME = "_approve_outcome_{cand}"
REPORT_DOWNLOAD = "report_download"
ACTIVITY_PERSON = "activity_person"

# admin: deleting a run (dashboard) and the Roles page
DELETE_CONFIRM = "delete_confirm_{run}"
DELETE_REASON = "delete_reason_{run}"
DELETE_SEND = "delete_send_{run}"
DELETE_OUTCOME = "_delete_outcome_{run}"
DELETED_NOTE = "_deleted_note"  # shown once on the Runs page after a deletion
ROLES_RULE = "roles_rule"
ROLES_ROLE = "roles_role"
ROLES_REASON = "roles_reason"
ROLES_GRANT = "roles_grant"
ROLES_REVOKE_PICK = "roles_revoke_pick"
ROLES_REVOKE = "roles_revoke"
ROLES_OUTCOME = "_roles_outcome"
ROLES_CHECK = "roles_check"

# branches and comparing runs (issue 34)
QP_RUNS = "runs"  # the compare-runs page: the runs side by side, comma-separated
BRANCH_SEND = "branch_send_{where}"  # "Branch from here" on the candidate page, the lineage, the dashboard
BRANCH_PICK = "branch_pick"  # the dashboard's candidates to branch from (a seed population)
BRANCH_ERROR = "_branch_error_{where}"
NEW_BRANCH = "new_branch"  # the draft's [branch] table (the base run and its candidates), when it is a branch
NEW_UNBRANCH = "new_unbranch"
LIN_BOTH_TREES = "lin_both_trees"
CMPR_RUNS = "cmpr_runs"
CMPR_X = "cmpr_x"
CMPR_BASE = "cmpr_base"
RUNS_COMPARE_OPEN = "runs_compare_open"
GAIN_CANDIDATE = "gain_candidate"
# dashboard: Analyze (ui/analyze_panel.py)
ANALYZE_FINDING = "analyze_finding_{finding}"  # a finding's box (F1, F2 …)
ANALYZE_ACTION = "analyze_action_{finding}_{i}"  # the i-th action of a finding, by the finding's kind
ANALYZE_DIAGNOSE = "analyze_diagnose"
ANALYZE_JOB = "_analyze_job_{run}"  # the diagnosis job this session asked for
ANALYZE_ASK = "analyze_ask"  # a big run's "Analyze this run" (ui.analyze_panel.ON_DEMAND_ABOVE)
ANALYZE_ASKED = "_analyze_asked_{run}"  # the run's token when this session asked for its findings
