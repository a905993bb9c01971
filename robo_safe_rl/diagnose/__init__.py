"""Diagnose physics errors caused by bad actions: from the incidents SafeStep recorded to their root cause.

- :func:`~robo_safe_rl.diagnose.inputs.resolve` reads the incidents a PATH names, strictly and within size limits,
  checking every record and array against the record schema (:mod:`~robo_safe_rl.diagnose.schema`);
- :func:`~robo_safe_rl.diagnose.pipeline.diagnose_source` analyses each action, attributes it
  (:mod:`~robo_safe_rl.diagnose.attribution` documents the rules), consults the policy checkpoint and the run's
  safety events, groups incidents sharing a cause, replays them in fresh envs and writes reproduction scripts;
- :func:`~robo_safe_rl.diagnose.vet.vet_policy` runs a checkpoint's actor (rebuilt by
  :func:`~robo_safe_rl.checkpoint.policy.load_policy`) in its task and reports its first bad action;
- :func:`~robo_safe_rl.diagnose.cli.main` is ``tools/diagnose.py``.

Nothing here imports the task package ``envs``: replays ``gymnasium.make`` the recorded task id, which the caller
registers (``tools/diagnose.py`` imports ``envs``).
"""
