"""The agent loop: a LangGraph state machine of model turns and judge nodes (kernelfix.agent).

Modules: ``config`` (AgentConfig), ``state`` (graph state, Turn, the Trajectory schema),
``models`` (litellm and replay models, retries), ``prompting`` (templates from
kernelfix.prompts), ``shapes`` (the ShapeProp shape block), ``policy`` (best, goal,
budgets), ``events`` (events for a UI, Controls), ``graph`` (the StateGraph),
``session`` (the session directory: git, trajectory.json, checkpoints),
``runner`` (Session: create, run, resume), ``headless`` (terminal reporting).
Nothing heavy is imported here: ``kernelfix.config`` reads AgentConfig cheaply.
"""
