"""gateway: validates inbound commands and appends the facts they amount to."""
