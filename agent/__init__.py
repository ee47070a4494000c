"""The agent: LLM providers, prompt rendering, reply parsing and the LLM side of each operator."""
