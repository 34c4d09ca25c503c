package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The instance identity: the owner name this process's run leases carry.
// It is stable across restarts, so a restarted server takes its own runs
// back at once instead of waiting out their leases like a stranger.
//
//   - SQLite (--state-dir): the server locks the state dir (flock on
//     stateDir/lock) for as long as it runs — a second server on the same
//     dir is refused — and keeps its id in stateDir/instance-id, created
//     on first start. The lock proves no other process owns those runs.
//   - Postgres (--database-url): --instance-id / CHATGRAPH_INSTANCE_ID,
//     default "<hostname>:<listen port>" (random with port 0). It must be
//     unique among the processes that run at the same time on one
//     database.
const (
	lockFile       = "lock"
	instanceIDFile = "instance-id"
)

// instanceFlags adds the identity and lease flags to fs.
func instanceFlags(fs *flag.FlagSet, c *config, ge func(string) string) error {
	fs.StringVar(&c.instanceID, "instance-id", ge("CHATGRAPH_INSTANCE_ID"),
		"this process's stable owner name in run leases (CHATGRAPH_INSTANCE_ID; default: kept in the state dir, or <hostname>:<port> with Postgres)")
	ttl, err := time.ParseDuration(envOr(ge, "CHATGRAPH_LEASE_TTL", "15s"))
	if err != nil {
		return fmt.Errorf("CHATGRAPH_LEASE_TTL: %w", err)
	}
	fs.DurationVar(&c.leaseTTL, "lease-ttl", ttl, "how long another process waits before it takes over the runs of a process that died (CHATGRAPH_LEASE_TTL)")
	return nil
}

// recoveryInterval is how often the server looks for runs whose process
// died: every 5 s, or twice per lease TTL when that is shorter.
func (c *config) recoveryInterval() time.Duration {
	if c.leaseTTL > 0 && c.leaseTTL/2 < 5*time.Second {
		return max(c.leaseTTL/2, 50*time.Millisecond)
	}
	return 5 * time.Second
}

// bindingTTL is how long a dead process's Redis run bindings outlive it:
// no longer than its run leases (default 10 s), so a run taken over after
// its lease expired can bind in its new process at once.
func (c *config) bindingTTL() time.Duration {
	if c.leaseTTL > 0 && c.leaseTTL < 10*time.Second {
		return c.leaseTTL
	}
	return 10 * time.Second
}

// turnTTL is how long a dead process's chat turns, and its runs' places
// in their chats' lines, outlive it: past its runs' lease TTL and three
// recovery passes, so that a run recovered by another process (or by this
// one restarted) takes its chat's turn back, and a turn it had queued
// behind its place, before a run queued after them would take the turn
// and overtake them. The queued turn is started again by the pass that
// recovers the run ahead of it, or by the next one when its binding
// outlived that run's lease (a binding lasts up to a lease TTL too); the
// third pass is to spare.
func (c *config) turnTTL() time.Duration {
	return max(c.leaseTTL, 0) + 3*c.recoveryInterval()
}

// claimInstance sets c.owner: with SQLite it locks the state dir (unlock
// releases it) and reads or creates the id kept there.
func claimInstance(c *config) (unlock func(), err error) {
	if c.databaseURL != "" {
		c.owner = c.instanceID
		if c.owner == "" {
			c.owner = defaultInstanceID(c.addr)
		}
		return func() {}, nil
	}
	if err := os.MkdirAll(c.stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(c.stateDir, lockFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state dir lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("state dir %s is in use by another chatgraph process", c.stateDir)
		}
		return nil, fmt.Errorf("state dir lock: %w", err)
	}
	unlock = func() { _ = f.Close() } // closing the file releases the lock
	c.owner = c.instanceID
	if c.owner == "" {
		if c.owner, err = stateDirID(c.stateDir); err != nil {
			unlock()
			return nil, err
		}
	}
	return unlock, nil
}

// stateDirID reads the instance id kept in dir, creating it on first use
// (written to a temp file, then renamed: a crash leaves no torn id).
func stateDirID(dir string) (string, error) {
	path := filepath.Join(dir, instanceIDFile)
	if b, err := os.ReadFile(path); err == nil {
		if id := strings.TrimSpace(string(b)); id != "" {
			return id, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("instance id: %w", err)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := "sqlite-" + hex.EncodeToString(b[:])
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("instance id: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("instance id: %w", err)
	}
	return id, nil
}

// defaultInstanceID is "<hostname>:<port of addr>": stable across
// restarts of one deployment slot, distinct for two processes on one host.
// A port picked at start (":0") is not stable: the id is then random.
func defaultInstanceID(addr string) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		port = addr
	}
	if port == "0" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		port = "0-" + hex.EncodeToString(b[:])
	}
	return host + ":" + port
}
