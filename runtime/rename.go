package runtime

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/handoff-go/handoff"
	"github.com/handoff-go/handoff/snapshot"
)

// Renamed and removed classes: Config.ClassRenames gives an old name's
// saved messages to its new class at start; what is left of classes no
// longer configured becomes dead letters, logged as one line.

// checkRenames reports the problems of cfg.ClassRenames and copies it.
func (cfg *Config) checkRenames(bad func(string, ...any)) {
	if len(cfg.ClassRenames) == 0 {
		cfg.ClassRenames = nil
		return
	}
	names := map[string]bool{}
	for _, c := range cfg.Classes {
		names[c.Name] = true
	}
	renames := make(map[string]string, len(cfg.ClassRenames))
	for _, from := range slices.Sorted(maps.Keys(cfg.ClassRenames)) {
		to := cfg.ClassRenames[from]
		switch {
		case from == "" || to == "":
			bad("ClassRenames: empty class name in %q -> %q", from, to)
		case names[from]:
			bad("ClassRenames: %q is a configured class: its saved messages are its own", from)
		case !names[to]:
			bad("ClassRenames: %q -> %q names no configured class", from, to)
		}
		renames[from] = to
	}
	cfg.ClassRenames = renames
}

// renameClasses applies renames (Config.ClassRenames) to the state
// file, in one transaction, and logs one line with what it renamed.
func renameClasses(store *snapshot.State, renames map[string]string, log *slog.Logger) error {
	if len(renames) == 0 {
		return nil
	}
	began := time.Now()
	renamed, err := renameInFile(store, renames)
	if err != nil {
		return fmt.Errorf("runtime: rename classes in the state file: %w", err)
	}
	var parts []string
	total := 0
	for _, from := range slices.Sorted(maps.Keys(renamed)) {
		n := 0
		var by []string
		for _, b := range slices.Sorted(maps.Keys(renamed[from])) {
			if c := renamed[from][b]; c > 0 {
				n += c
				by = append(by, fmt.Sprintf("%s %d", b, c))
			}
		}
		total += n
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s -> %s: %s", from, renames[from], strings.Join(by, ", ")))
		}
	}
	log.Info("renamed classes in the state file", "records", total, "renamed", strings.Join(parts, "; "),
		"mappings", len(renames), "took", time.Since(began))
	return nil
}

// orphans counts the saved messages of classes no longer configured that
// became dead letters. While it collects (the recovery), they are logged
// as one line by flush; after it, one line each.
type orphans struct {
	mu         sync.Mutex
	collecting bool
	byClass    map[string]int
}

// collect starts collecting.
func (o *orphans) collect() {
	o.mu.Lock()
	o.collecting, o.byClass = true, map[string]int{}
	o.mu.Unlock()
}

// add counts one orphan, or logs it when not collecting.
func (o *orphans) add(log *slog.Logger, m handoff.Message) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.collecting {
		o.byClass[m.Class]++
		return
	}
	log.Warn("saved message of an unknown class became a dead letter; map its old name with Config.ClassRenames to keep such messages",
		"class", m.Class, "id", m.ID)
}

// flush logs what was collected as one line and stops collecting.
func (o *orphans) flush(log *slog.Logger) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.collecting {
		return
	}
	o.collecting = false
	if len(o.byClass) == 0 {
		return
	}
	total := 0
	var parts []string
	for _, c := range slices.Sorted(maps.Keys(o.byClass)) {
		total += o.byClass[c]
		parts = append(parts, fmt.Sprintf("%s %d", c, o.byClass[c]))
	}
	log.Warn("saved messages of classes no longer configured became dead letters; map an old name with Config.ClassRenames, then requeue them",
		"dead_lettered", total, "classes", strings.Join(parts, ", "))
}
