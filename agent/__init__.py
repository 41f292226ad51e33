"""The agent loop: a LangGraph state machine of model turns and judge nodes (kernelfix.agent)."""
