"""How a file becomes a picture: the decode contract every path reads files by, and TorchCodec where installed."""
