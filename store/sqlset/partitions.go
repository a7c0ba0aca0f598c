package sqlset

// Partitions holds the statements of the partitioned layout: an opt-in
// layout (PostgreSQL only) in which the inbox is range-partitioned by
// expires_at, so that expiry drops whole partitions instead of deleting
// rows one by one (package retention: Partition, MaintainPartitions).
//
// A unique index of a partitioned PostgreSQL table must contain the
// partition key, so the inbox's primary key becomes (consumer, message_id,
// expires_at) and no longer alone refuses a second record of one message
// with another expiry. In the partitioned layout the inbox's inserts
// (Inbox.Insert, InsertStrict, Claim, BatchInsert) therefore call
// functions the conversion creates: each takes a transaction-scoped
// advisory lock on (consumer, message_id), then inserts only if no record
// of that message exists in any partition, in a statement of its own
// (under READ COMMITTED it sees every record committed before the lock was
// granted). The primary key still refuses a duplicate within one
// partition (two inserts of one batch, say). The Set of a partitioned
// store (store.Names.Layout = store.LayoutPartitioned) holds those inbox
// statements; the rest are the plain layout's.
//
// The statements below are run by package retention on a PostgreSQL
// store; they are not prepared by store/storetest (Convert is a script,
// and the others call functions only Convert creates): the retention
// package's partition tests convert a store and run each of them.
type Partitions struct {
	// Convert is the script, run in one transaction, that converts the
	// plain inbox into the partitioned layout: it renames the inbox, creates
	// the partitioned table (same columns, primary key (consumer,
	// message_id, expires_at)), its default partition and the layout's
	// functions, copies every row and drops the old table. It takes no
	// arguments. The caller adds the range partitions (Add) before the copy
	// is committed, so the copied rows land in them rather than in the
	// default partition.
	Convert string
	// Converted reports whether the inbox is partitioned: no arguments;
	// returns one boolean.
	Converted string
	// Add creates the range partition $1 (name, text) for expires_at in
	// [$2, $3) (micros, bigint) unless it exists, moving any rows of that
	// range out of the default partition in the same transaction; returns
	// one boolean, true when it was created.
	Add string
	// List returns every partition of the inbox: name, lower and upper
	// bound (micros; both 0 for the default partition), is-default, and the
	// planner's row estimate (reltuples, -1 when never analysed).
	List string
	// Keeps reports whether partition $1 (name) holds a row that a
	// minimum age keeps: $2 consumers (text[]), $3 the received_at cut-off
	// of each (bigint[]): a row of consumer $2[i] received at or after
	// $3[i]. Returns one boolean.
	Keeps string
	// Drop detaches partition $1 (name) from the inbox and drops it. The
	// caller has checked its upper bound is in the past (every row in it
	// has expired) and that Keeps is false; $2 is the lock timeout, as text
	// ("2s"), so a detach that would wait for long-running transactions
	// gives up instead of queueing every writer behind it.
	Drop string
}
