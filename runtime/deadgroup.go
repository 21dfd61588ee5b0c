package runtime

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"

	"github.com/handoff-go/handoff/snapshot"
)

// The group's dead letters (Runtime.GroupDeadLetters): those of the
// partitions this instance owns from its state file, those of the other
// partitions from their changelogs. What the changelog of a partition
// holds is kept in memory between listings (snapshot.Changelog.DeadIn): a listing reads
// each such partition from where the last one stopped, so a dashboard
// that pages or polls reads only what was written since.

// GroupDeadLetter is a dead letter of the group, as any instance lists it
// ([Runtime.GroupDeadLetters]).
type GroupDeadLetter struct {
	DeadLetter
	// Topic and Partition are the input partition whose changelog holds
	// it (the partition it moves with); "" and -1 for a dead letter of
	// no partition (a class without topics, or the changelog off), which
	// stays in its instance's state file.
	Topic     string
	Partition int32
	// Owner is the name of the instance that owns it: that instance's
	// Config.Instance (for a member of another build, its client ID @
	// host and member ID); "" when no instance owns its partition now
	// (the group is rebalancing, or empty).
	Owner string
}

// GroupDeadLetters lists the dead letters of every partition of the
// group, as every instance sees them: those of the partitions this
// instance owns (and of no partition) from its state file, the others
// from their partitions' changelogs, each with its owner. It selects,
// pages and counts as [Runtime.FindDeadLetters] does: up to limit dead
// letters that filter selects, after the cursor after (the zero Cursor
// for the first page), the cursor of the next page (zero when there is
// none) and total, the number filter selects in all. The order is by the
// last failure (DeadLetter.LastFailed), then by ID: oldest first, or
// newest first with filter.Newest; a cursor is of one order (the other
// is refused with [ErrBadCursor]) and stays valid on every instance.
// A dead letter that fails again after a requeue moves to the newest end.
//
// Without the changelog (LocalStateOnly, or no topics) it lists this
// instance's own, with Owner this instance's name.
//
// Cost: every call reads every dead letter of this state file (of
// filter.Class when set) and, for each partition this instance does not
// own, what its changelog received since the last call (the first call
// reads each from its start: compaction keeps it bounded); it keeps the
// changelogs' dead letters in memory between calls (about the size of
// their records) and asks the group's coordinator who owns what (one
// DescribeGroups) when the page has a dead letter of another instance.
// It blocks for those reads until ctx ends; a ctx without a deadline is
// bounded by Config.ChangelogTimeout. A partition that moves during the
// call may be listed as its former owner had it. It needs a running
// runtime; a limit below 1 is an error.
func (r *Runtime) GroupDeadLetters(ctx context.Context, filter DeadFilter, after Cursor, limit int) (page []GroupDeadLetter, next Cursor, total int, err error) {
	if _, err := listing(r.state, "group dead letters", limit); err != nil {
		return nil, "", 0, err
	}
	from, err := after.groupDeadAt(filter.Newest)
	if err != nil {
		return nil, "", 0, err
	}
	ctx, cancel := r.groupCtx(ctx)
	defer cancel()
	pg := &groupPager{filter: filter, after: from, limit: limit}
	if err := r.groupDead(ctx, filter.Class, pg.add); err != nil {
		return nil, "", 0, err
	}
	page, more := pg.page()
	if err := r.nameOwners(ctx, page); err != nil {
		return nil, "", 0, err
	}
	if more {
		next = groupDeadCursor(filter.Newest, page[len(page)-1].deadAt())
	}
	return page, next, pg.total, nil
}

// GetGroupDeadLetter returns the dead letter with ID key wherever it is
// in the group, with its owner: from this instance's state file when it
// owns it, else from its partition's changelog. It returns an error
// wrapping [ErrBadKey] for a key that is not an ID and one wrapping
// [ErrNotFound] for one that is no dead letter of the group. It reads
// as [Runtime.GroupDeadLetters] does and blocks until ctx ends (bounded
// by Config.ChangelogTimeout without a deadline).
func (r *Runtime) GetGroupDeadLetter(ctx context.Context, key string) (GroupDeadLetter, error) {
	if _, err := snapshot.ParseDeadID(key); err != nil {
		return GroupDeadLetter{}, fmt.Errorf("%w: %w", ErrBadKey, err)
	}
	found, err := r.groupDeadByID(ctx, []string{key})
	if err != nil {
		return GroupDeadLetter{}, err
	}
	g, ok := found[key]
	if !ok {
		return GroupDeadLetter{}, fmt.Errorf("%w: dead letter %s (in no partition of the group)", ErrNotFound, key)
	}
	return g, nil
}

// groupDeadByID returns the group's dead letters with the IDs ids, with
// their owners.
func (r *Runtime) groupDeadByID(ctx context.Context, ids []string) (map[string]GroupDeadLetter, error) {
	if _, err := r.state.get(); err != nil {
		return nil, err
	}
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	ctx, cancel := r.groupCtx(ctx)
	defer cancel()
	out := map[string]GroupDeadLetter{}
	err := r.groupDead(ctx, "", func(g *GroupDeadLetter) {
		if want[g.Key] {
			out[g.Key] = *g
		}
	})
	if err != nil {
		return nil, err
	}
	page := slices.Collect(maps.Values(out))
	if err := r.nameOwners(ctx, page); err != nil {
		return nil, err
	}
	for _, g := range page {
		out[g.Key] = g
	}
	return out, nil
}

// groupCtx bounds ctx by ChangelogTimeout when it has no deadline.
func (r *Runtime) groupCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, r.cfg.ChangelogTimeout)
}

// groupDead calls add with every dead letter of the group of class (""
// for all): this instance's from the state file (Owner set to its
// name), the others' from the changelogs (Owner "" and Partition set:
// nameOwners names them).
func (r *Runtime) groupDead(ctx context.Context, class string, add func(*GroupDeadLetter)) error {
	l := r.clog
	c := l.cl()
	err := r.state.eachDead(class, func(id snapshot.DeadID, rec *snapshot.Record) {
		g := GroupDeadLetter{DeadLetter: deadLetterOf(id, rec), Partition: -1, Owner: r.cfg.Instance}
		if p, ok := c.Route(&rec.Message); ok {
			if !c.OwnsPartition(p) {
				return // its partition's owner lists it (this copy is unused)
			}
			g.Topic, g.Partition = p.Topic, p.Partition
		}
		add(&g)
	})
	if err != nil {
		return fmt.Errorf("runtime: group dead letters: %w", err)
	}
	return c.DeadIn(ctx, l.unowned(), func(p snapshot.Partition, d *snapshot.ChangelogDead) {
		if class != "" && d.Record.Message.Class != class {
			return
		}
		g := GroupDeadLetter{DeadLetter: deadLetterOf(d.ID, &d.Record), Topic: p.Topic, Partition: p.Partition}
		add(&g)
	})
}

// nameOwners sets the Owner of the dead letters of page that have none
// (those read from the changelogs), asking the group's coordinator once.
func (r *Runtime) nameOwners(ctx context.Context, page []GroupDeadLetter) error {
	if !slices.ContainsFunc(page, func(g GroupDeadLetter) bool { return g.Owner == "" }) {
		return nil
	}
	owners, err := r.clog.client.Owners(ctx)
	if err != nil {
		return fmt.Errorf("runtime: group dead letters: who owns the partitions: %w", err)
	}
	for i := range page {
		if page[i].Owner == "" {
			page[i].Owner = owners[page[i].Topic][page[i].Partition]
		}
	}
	return nil
}

// eachDead calls fn with every dead letter of class ("" for all) in the
// file, with its ID, in one read transaction, a chunk of records in
// memory at a time. fn must not keep rec.
func (f *stateFile) eachDead(class string, fn func(id snapshot.DeadID, rec *snapshot.Record)) error {
	return f.store.EachDead(class, fn)
}

// deadAt is a place in the group listing's order: a dead letter's last
// failure (Unix nanoseconds) and ID.
type deadAt struct {
	at  int64
	key string
}

func (g *GroupDeadLetter) deadAt() deadAt { return deadAt{g.LastFailed.UnixNano(), g.Key} }

func (a deadAt) compare(b deadAt) int {
	if c := cmp.Compare(a.at, b.at); c != 0 {
		return c
	}
	return cmp.Compare(a.key, b.key)
}

// groupPager keeps, of the dead letters it is given, the count of those
// filter selects and the first limit of them after the cursor's place,
// in memory for about two pages.
type groupPager struct {
	filter DeadFilter
	after  *deadAt // nil: from the first
	limit  int
	total  int
	cand   []GroupDeadLetter
}

// before reports whether a comes before b in the pager's order.
func (pg *groupPager) before(a, b deadAt) bool {
	if pg.filter.Newest {
		return a.compare(b) > 0
	}
	return a.compare(b) < 0
}

func (pg *groupPager) add(g *GroupDeadLetter) {
	if !pg.filter.Match(&g.DeadLetter) {
		return
	}
	pg.total++
	if pg.after != nil && !pg.before(*pg.after, g.deadAt()) {
		return
	}
	pg.cand = append(pg.cand, *g)
	if len(pg.cand) > 2*pg.limit+64 {
		pg.sort()
		clear(pg.cand[pg.limit+1:])
		pg.cand = pg.cand[:pg.limit+1]
	}
}

func (pg *groupPager) sort() {
	slices.SortFunc(pg.cand, func(a, b GroupDeadLetter) int {
		x, y := a.deadAt(), b.deadAt()
		if pg.filter.Newest {
			return y.compare(x)
		}
		return x.compare(y)
	})
}

// page returns the page and whether more follow it.
func (pg *groupPager) page() ([]GroupDeadLetter, bool) {
	pg.sort()
	if len(pg.cand) > pg.limit {
		return pg.cand[:pg.limit], true
	}
	return pg.cand, false
}

// Cursor kinds of the group listing.
const (
	cursorGroup       = 'g'
	cursorGroupNewest = 'h'
)

func groupDeadCursor(newest bool, at deadAt) Cursor {
	kind := byte(cursorGroup)
	if newest {
		kind = cursorGroupNewest
	}
	return makeCursor(kind, append(binary.BigEndian.AppendUint64(nil, uint64(at.at)), at.key...))
}

// groupDeadAt returns the place of a cursor of the group listing in the
// order newest says; nil for the zero cursor.
func (c Cursor) groupDeadAt(newest bool) (*deadAt, error) {
	kind, what := byte(cursorGroup), "group dead letters"
	if newest {
		kind, what = cursorGroupNewest, "group dead letters, newest first"
	}
	b, err := c.raw(kind, what)
	if err != nil || b == nil {
		return nil, err
	}
	if len(b) <= 8 {
		return nil, fmt.Errorf("%w: %q is not a cursor of %s", ErrBadCursor, string(c), what)
	}
	return &deadAt{int64(binary.BigEndian.Uint64(b)), string(b[8:])}, nil
}
