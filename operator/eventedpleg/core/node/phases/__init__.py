"""What the agent does on its node: the phases (generators that yield effects), the effects themselves, the
transaction, and the rules for when it acts. Pure."""
