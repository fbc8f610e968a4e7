"""A Triton replica of a scaled-out installation: the agent that keeps its Triton holding every live version."""
