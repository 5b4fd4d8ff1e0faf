"""The NodeConfig API as pydantic models: the source of the CRD, its validation and descriptions."""
