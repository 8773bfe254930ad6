"""splitbench: what does the link between two machines cost a split LLM?"""

__version__ = "0.1.0"
