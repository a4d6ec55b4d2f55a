"""Index building: the stages in order, each checkpointed so a killed build resumes."""
