"""Long-term memories: facts about a user kept across sessions, extracted after a turn and recalled by meaning
before the next (docs/memories.md). Not the chat window (engine/conversation), which is one session's history."""
