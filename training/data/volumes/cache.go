package volumes

import (
	"container/list"
	"sync"
	"sync/atomic"
)

// cache keeps decoded volumes up to a byte bound, least recently used out
// first. A volume in use by a worker is never evicted, so the bound holds
// for the memory actually referenced; a worker needing room waits for it.
// Concurrent requests for one volume share a single decode.
type cache struct {
	mu      sync.Mutex
	room    *sync.Cond
	bound   int64
	used    int64
	entries map[int]*entry
	lru     *list.List // of *entry, most recent at front
	decode  func(int) ([]float32, error)
	decodes atomic.Int64
}

type entry struct {
	key   int
	size  int64
	refs  int
	ready chan struct{}
	data  []float32
	err   error
	elem  *list.Element
}

func newCache(bound int64, decode func(int) ([]float32, error)) *cache {
	c := &cache{bound: bound, entries: map[int]*entry{}, lru: list.New(), decode: decode}
	c.room = sync.NewCond(&c.mu)
	return c
}

// get returns volume key, of size bytes decoded, decoding it if needed, and
// a release to call when done with it.
func (c *cache) get(key int, size int64) ([]float32, func(), error) {
	c.mu.Lock()
	e, ok := c.entries[key]
	if ok {
		e.refs++
		c.lru.MoveToFront(e.elem)
		c.mu.Unlock()
		<-e.ready
	} else {
		e = c.admit(key, size)
		c.mu.Unlock()
		e.data, e.err = c.decode(key)
		c.decodes.Add(1)
		close(e.ready)
	}
	if e.err != nil {
		c.mu.Lock()
		if c.entries[key] == e { // a failed decode is not kept: it may be retried
			c.remove(e)
		}
		e.refs--
		c.mu.Unlock()
		return nil, nil, e.err
	}
	return e.data, func() { c.release(e) }, nil
}

// admit makes room for a new entry and inserts it; c.mu is held. The room
// is taken before decoding, so decodes in flight count against the bound.
func (c *cache) admit(key int, size int64) *entry {
	e := &entry{key: key, size: size, refs: 1, ready: make(chan struct{})}
	for c.used+e.size > c.bound {
		if !c.evict() {
			c.room.Wait()
		}
	}
	c.used += e.size
	e.elem = c.lru.PushFront(e)
	c.entries[key] = e
	return e
}

// evict drops the least recently used entry nobody holds; c.mu is held.
func (c *cache) evict() bool {
	for el := c.lru.Back(); el != nil; el = el.Prev() {
		if e := el.Value.(*entry); e.refs == 0 {
			c.remove(e)
			return true
		}
	}
	return false
}

func (c *cache) remove(e *entry) {
	delete(c.entries, e.key)
	c.lru.Remove(e.elem)
	c.used -= e.size
	c.room.Broadcast()
}

// release gives back a reference.
func (c *cache) release(e *entry) {
	c.mu.Lock()
	e.refs--
	c.mu.Unlock()
	c.room.Broadcast()
}
