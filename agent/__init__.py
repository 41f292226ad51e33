"""The agent loop: a LangGraph state machine of model turns and judge nodes (kernelfix.agent).

Modules: ``agent_config`` (AgentConfig), ``state`` (graph state, Turn, the Trajectory schema),
``models`` (litellm and replay models, retries), ``shapes`` (the ShapeProp shape block), ``policy``
(best, goal, budgets), ``search`` (a search's rules), ``events`` (events for a UI, Controls),
``runtime`` (what the nodes work with), ``graph`` and ``round_nodes`` (the StateGraph), ``judging`` (a
turn through the judge), ``draws`` (model replies), ``session_dir`` (the session directory: git,
trajectory.json, checkpoints), ``session`` (Session: create, run, resume), ``headless`` (terminal
reporting); ``batch/`` and ``export/``. The messages the model reads are ``kernelfix.prompts``.
Nothing heavy is imported here: ``kernelfix.cli.config_file`` reads AgentConfig cheaply.
"""
