"""Safe checkpoint reading/writing, state_dict diff and convert, safetensors."""
