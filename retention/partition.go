package retention

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/internal/sqlset"
	"github.com/idemkit/idem/store"
)

// The partitioned layout (opt-in, PostgreSQL).
//
// Deleting millions of expired rows a day is what hurts a busy database
// most in a same-database inbox: every deleted row is a WAL record, a dead
// tuple for autovacuum and index entries to clean, and a long DELETE
// competes with the writers for I/O and locks. In the partitioned layout
// the inbox, the idempotency keys and the effect ledger are
// range-partitioned by expires_at (daily by default): a
// partition whose upper bound has passed holds only expired rows, each by
// its own expiry, and is removed whole with DETACH PARTITION and DROP
// TABLE — a catalog change, whatever its size. (The outbox is partitioned
// by created_at: its events have no expiry of their own, and one of its
// partitions is dropped only when every event in it was published
// PartitionConfig.OutboxRetention ago, checked under the outbox's lock.)
// A consumer whose retention
// is longer than the span simply writes into a later partition; a
// consumer kept longer with Config.InboxMinAge keeps its partitions until
// they hold no row it keeps (their expired rows are then deleted in
// batches, as in the plain layout). Rows expiring beyond the partitions
// created so far go to the default partition until a pass creates theirs
// (moving them out); rows expired before the conversion stay in the
// default partition and are deleted in batches.
//
// The dedup decision stays a database constraint in the caller's
// transaction, with one addition: a partitioned table's unique key must
// contain its partition key, so each table's key gains expires_at. Their
// deciding inserts therefore take a transaction-scoped advisory lock on the
// record's key and insert only when no partition holds it, in a statement
// of their own (see
// sqlset.Partitions); concurrent deliveries of one message are serialised
// by the lock and the second one finds the first's record. This needs the
// consumer's transaction to run at READ COMMITTED (PostgreSQL's default,
// and what idem's consumer runtime uses): under REPEATABLE READ the
// snapshot taken before the lock would not see a record committed while
// waiting for it.

// PartitionConfig configures the partitioned layout's maintenance.
type PartitionConfig struct {
	// Span is the range of expires_at each partition covers. Defaults to
	// 24h (daily partitions, aligned on UTC midnight). At least a minute,
	// and a whole number of minutes.
	Span time.Duration
	// Ahead is how far past now partitions are created ahead of the rows
	// that will land in them. Defaults to 8 days: the inbox's default
	// retention (7 days) and a day to spare, so a GC that misses a pass
	// never lets new rows fall into the default partition.
	Ahead time.Duration
	// LockTimeout bounds how long a partition's detach waits for its lock
	// (it needs the inbox briefly to itself); a detach that would wait
	// longer gives up and is tried at the next pass. Defaults to 2s.
	LockTimeout time.Duration
	// OutboxRetention is how long a published outbox event is kept after
	// its publication: an outbox partition (by created_at) is dropped once
	// its upper bound is that far in the past and every event in it was
	// published before then. Defaults to 7 days; the GC sets it from
	// Config.OutboxRetention.
	OutboxRetention time.Duration
}

func (c PartitionConfig) withDefaults() (PartitionConfig, error) {
	if c.Span == 0 {
		c.Span = 24 * time.Hour
	}
	if c.Ahead == 0 {
		c.Ahead = 8 * 24 * time.Hour
	}
	if c.LockTimeout == 0 {
		c.LockTimeout = 2 * time.Second
	}
	if c.OutboxRetention == 0 {
		c.OutboxRetention = 7 * 24 * time.Hour
	}
	if c.Span < time.Minute || c.Span%time.Minute != 0 || c.Ahead < 0 || c.LockTimeout < 0 || c.OutboxRetention < 0 {
		return c, checks.Optionf("retention: PartitionConfig.Span must be a whole number of minutes (at least one); Ahead, LockTimeout and OutboxRetention must not be negative")
	}
	return c, nil
}

// ErrNotPartitionable reports a store that cannot have the partitioned
// layout: not PostgreSQL, or not opened with store.LayoutPartitioned.
var ErrNotPartitionable = errors.New("retention: the partitioned layout needs a PostgreSQL store opened with store.Names.Layout = store.LayoutPartitioned")

// PartitionReport says what one maintenance pass did to the partitions.
type PartitionReport struct {
	// Created names the partitions created (ahead, or for rows that were
	// waiting in the default partition).
	Created []string `json:"created,omitempty"`
	// Dropped names the partitions detached and dropped, every row in
	// them expired.
	Dropped []string `json:"dropped,omitempty"`
	// DroppedRows is the planner's estimate of the rows the dropped
	// partitions held (0 when never analysed).
	DroppedRows int64 `json:"dropped_rows_estimate,omitempty"`
	// Kept names expired partitions kept because Config.InboxMinAge keeps
	// a row in them, or (the outbox) because an event in them is still to
	// publish, parked, or published within the retention.
	Kept []string `json:"kept,omitempty"`
	// Busy names partitions whose creation or detach gave up waiting for
	// a lock a long transaction held (tried again at the next pass).
	Busy []string `json:"busy,omitempty"`
}

// partitionStmts returns d's partitioned-layout statements, or
// ErrNotPartitionable.
func partitionStmts[TTx any](d store.Driver[TTx]) (*sqlset.Partitions, error) {
	p := d.Statements().Partitions
	if p == nil || d.Dialect() != store.Postgres || d.Names().Layout != store.LayoutPartitioned {
		return nil, ErrNotPartitionable
	}
	return p, nil
}

// Partitioned reports whether every table of d's partitioned layout (the
// inbox, the idempotency keys and the effect ledger) is partitioned.
func Partitioned[TTx any](ctx context.Context, d store.Driver[TTx]) (bool, error) {
	p := d.Statements().Partitions
	if p == nil || d.Dialect() != store.Postgres {
		return false, nil
	}
	for _, t := range p.Tables {
		var ok bool
		if err := d.Pool().QueryRow(ctx, p.Converted, t.Name).Scan(&ok); err != nil {
			return false, fmt.Errorf("retention: partitioned %s: %w", t.Name, err)
		}
		if !ok {
			return false, nil
		}
	}
	return true, nil
}

// Partition converts d's inbox, idempotency keys, outbox and effect ledger
// (migrated by package migrate) to the partitioned layout, in one transaction: each table is
// locked, renamed, recreated partitioned with every row copied, and the
// partitions from now to now+Ahead are created. Run it with the
// components stopped or expect them to wait for it (the tables are
// locked while their rows are copied: about a second per few hundred
// thousand rows); then open every store on the database with
// store.LayoutPartitioned. On tables already partitioned it only creates
// the partitions ahead. It fails with ErrNotPartitionable unless d is a
// PostgreSQL store opened with store.LayoutPartitioned.
func Partition[TTx any](ctx context.Context, d store.Driver[TTx], cfg PartitionConfig, now time.Time) (PartitionReport, error) {
	p, err := partitionStmts(d)
	if err != nil {
		return PartitionReport{}, err
	}
	if cfg, err = cfg.withDefaults(); err != nil {
		return PartitionReport{}, err
	}
	var rep PartitionReport
	tx, err := d.Begin(ctx)
	if err != nil {
		return rep, fmt.Errorf("retention: partition: %w", err)
	}
	defer func() { _ = d.Rollback(context.WithoutCancel(ctx), tx) }()
	q := d.Tx(tx)
	if _, err := q.Exec(ctx, p.Functions); err != nil {
		return rep, fmt.Errorf("retention: partition: create the layout's functions: %w", err)
	}
	for _, t := range p.Tables {
		var done bool
		if err := q.QueryRow(ctx, p.Converted, t.Name).Scan(&done); err != nil {
			return rep, fmt.Errorf("retention: partition %s: %w", t.Name, err)
		}
		if !done {
			if _, err := q.Exec(ctx, p.Convert, t.Name, t.Key, t.Column); err != nil {
				return rep, fmt.Errorf("retention: partition: convert %s: %w", t.Name, err)
			}
		}
		created, busy, err := ensure(ctx, q, p, t, cfg, now)
		rep.Created = append(rep.Created, created...)
		if err == nil && len(busy) > 0 {
			err = fmt.Errorf("retention: partition: create %s: %w", busy[0], store.ErrLockTimeout)
		}
		if err != nil {
			return rep, err
		}
	}
	if _, err := q.Exec(ctx, p.Inserts); err != nil {
		return rep, fmt.Errorf("retention: partition: create the layout's insert functions: %w", err)
	}
	if err := d.Commit(ctx, tx); err != nil {
		return rep, fmt.Errorf("retention: partition: %w", err)
	}
	return rep, nil
}

// partitionName names table's partition starting at lo for span: the
// table's name, "_p" and the UTC date (daily spans) or date and time.
func partitionName(table string, lo time.Time, span time.Duration) string {
	if span%(24*time.Hour) == 0 {
		return table + "_p" + lo.UTC().Format("20060102")
	}
	return table + "_p" + lo.UTC().Format("20060102_1504")
}

// bounds returns the partition of span holding t: [lo, hi).
func bounds(t time.Time, span time.Duration) (lo, hi time.Time) {
	lo = time.UnixMicro(t.UnixMicro() - mod(t.UnixMicro(), span.Microseconds())).UTC()
	return lo, lo.Add(span)
}

func mod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

// ensure creates table's partitions from the one holding now to the one
// holding now+Ahead. A creation that gives up waiting for the default
// partition's lock (a long transaction holds it) ends the loop with that
// partition's name in busy and no error: the partitions already ahead
// leave room to try again at the next pass.
func ensure(ctx context.Context, q store.Querier, p *sqlset.Partitions, t sqlset.PartitionedTable, cfg PartitionConfig, now time.Time) (created, busy []string, err error) {
	lo, _ := bounds(now, cfg.Span)
	for ; !lo.After(now.Add(cfg.Ahead)); lo = lo.Add(cfg.Span) {
		name := partitionName(t.Name, lo, cfg.Span)
		var ok bool
		if err := q.QueryRow(ctx, p.Add, t.Name, name, store.Micros(lo), store.Micros(lo.Add(cfg.Span)), lockTimeout(cfg), t.Column).Scan(&ok); err != nil {
			if errors.Is(err, store.ErrLockTimeout) {
				return created, []string{name}, nil
			}
			return created, nil, fmt.Errorf("retention: create partition %s: %w", name, err)
		}
		if ok {
			created = append(created, name)
		}
	}
	return created, nil, nil
}

// partition is one row of Partitions.List.
type partition struct {
	name     string
	lo, hi   int64
	isDef    bool
	estimate int64
}

func listPartitions(ctx context.Context, q store.Querier, p *sqlset.Partitions, table string) ([]partition, error) {
	rows, err := q.Query(ctx, p.List, table)
	if err != nil {
		return nil, fmt.Errorf("retention: list partitions: %w", err)
	}
	defer rows.Close()
	var out []partition
	for rows.Next() {
		var pt partition
		if err := rows.Scan(&pt.name, &pt.lo, &pt.hi, &pt.isDef, &pt.estimate); err != nil {
			return nil, fmt.Errorf("retention: list partitions: %w", err)
		}
		out = append(out, pt)
	}
	return out, rows.Err()
}

// MaintainPartitions is one pass over the partitioned tables: it creates
// the partitions ahead (PartitionConfig.Ahead) and drops every partition
// whose upper bound is at or before now — all its rows expired by their
// own expires_at (an effect only gets one when it completes: pending work
// stays in the default partition) — unless keep holds an inbox row in it
// (keep maps a consumer to the received_at from which its rows are kept,
// as Config.InboxMinAge computes it). A partition whose upper bound is
// after now is never dropped, so no row younger than its expiry is lost.
// The GC runs it on every pass of a partitioned store.
func MaintainPartitions[TTx any](ctx context.Context, d store.Driver[TTx], cfg PartitionConfig, now time.Time, keep map[string]time.Time) (PartitionReport, error) {
	p, err := partitionStmts(d)
	if err != nil {
		return PartitionReport{}, err
	}
	if cfg, err = cfg.withDefaults(); err != nil {
		return PartitionReport{}, err
	}
	var rep PartitionReport
	q := d.Pool()
	consumers := make([]string, 0, len(keep))
	for c := range keep {
		consumers = append(consumers, c)
	}
	slices.Sort(consumers)
	cutoffs := make([]int64, len(consumers))
	for i, c := range consumers {
		cutoffs[i] = store.Micros(keep[c])
	}
	for _, t := range p.Tables {
		created, busy, err := ensure(ctx, q, p, t, cfg, now)
		rep.Created = append(rep.Created, created...)
		rep.Busy = append(rep.Busy, busy...)
		if err != nil {
			return rep, err
		}
		parts, err := listPartitions(ctx, q, p, t.Name)
		if err != nil {
			return rep, err
		}
		// Every row of a partition whose upper bound has passed has
		// expired; an outbox partition (by created_at) must also be past
		// the outbox's retention, and is dropped only if every event in
		// it was published before that (checked under its lock).
		horizon := now
		if t.Name == "outbox" {
			horizon = now.Add(-cfg.OutboxRetention)
		}
		var drop []string
		estimates := map[string]int64{}
		for _, pt := range parts {
			if pt.isDef || pt.hi > store.Micros(horizon) {
				continue
			}
			if t.Name == "inbox" && len(consumers) > 0 {
				var kept bool
				if err := q.QueryRow(ctx, p.Keeps, pt.name, consumers, cutoffs).Scan(&kept); err != nil {
					return rep, fmt.Errorf("retention: partition %s: %w", pt.name, err)
				}
				if kept {
					rep.Kept = append(rep.Kept, pt.name)
					continue
				}
			}
			drop = append(drop, pt.name)
			estimates[pt.name] = max(pt.estimate, 0)
		}
		if len(drop) == 0 {
			continue
		}
		dropped := drop
		if t.Name == "outbox" {
			err = q.QueryRow(ctx, p.DropPublished, drop, store.Micros(horizon), lockTimeout(cfg)).Scan(&dropped)
		} else {
			_, err = q.Exec(ctx, p.Drop, t.Name, drop, lockTimeout(cfg))
		}
		if err != nil {
			if errors.Is(err, store.ErrLockTimeout) {
				rep.Busy = append(rep.Busy, drop...)
				continue
			}
			return rep, fmt.Errorf("retention: drop partitions %v: %w", drop, err)
		}
		for _, name := range drop {
			if !slices.Contains(dropped, name) {
				rep.Kept = append(rep.Kept, name) // an outbox partition with events to publish or keep
				continue
			}
			rep.Dropped = append(rep.Dropped, name)
			rep.DroppedRows += estimates[name]
		}
	}
	return rep, nil
}

// lockTimeout is cfg.LockTimeout as PostgreSQL's lock_timeout text.
func lockTimeout(cfg PartitionConfig) string {
	return fmt.Sprintf("%dms", max(cfg.LockTimeout.Milliseconds(), 1))
}
