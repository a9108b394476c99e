"""turnstream: LLM agent turns as event-sourced microservices on NATS JetStream."""

__version__ = "0.1.0"
