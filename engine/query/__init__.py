"""The query layer: conversation.search, navigation and context assembly over one user's store and index shard."""
