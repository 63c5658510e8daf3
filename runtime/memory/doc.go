// Package memory is the daemon's note memory: memory.write stores a note, memory.search finds notes by full-text relevance.
//
// Service validates and defaults requests (namespace "default", limit 10)
// and keeps notes in a store.MemoryStore, which ranks them (every backend
// splits text into words with store.Words). The memory_write and
// memory_search tools of runtime/tool call the same Service.
package memory
