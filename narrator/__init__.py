"""The turn: what a table's input becomes before, during and after the model runs.

* :mod:`narrator.engines` — the chat engines behind one interface (vLLM in-process, any
  OpenAI-compatible endpoint, echo), chosen by settings;
* :mod:`narrator.context` — the prompt, assembled in a fixed section order under a token budget;
* :mod:`narrator.turn` — the turn flow: record the turn, read its :class:`~story.context.TurnContext`
  in one story call, search the books, narrate (streamed), keep the take and its provenance;
* :mod:`narrator.extraction` — the narration's proposals as structured output, parsed one by one.

Transport (HTTP, MCP, Ray Serve) lives in :mod:`serve`, which imports this package; this package
never imports :mod:`serve`.
"""
