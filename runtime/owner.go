package runtime

import (
	"github.com/handoff-go/handoff/snapshot"
)

// Only a partition's owner blocks its keys. An instance that writes a
// blocker (a dead letter, a message waiting for its redelivery) of a key
// whose partition it does not own blocks nothing (orderedKeys.blockAt):
// the owner follows the record and blocks the key, and it alone ends the
// block (a requeue, a discard, the redelivery done). A parked record the
// owner follows whose key nothing blocks there is released
// (releaseFollowedParked): parked elsewhere behind a blocker the owner
// no longer has, it would otherwise wait for good.

// releaseFollowedParked releases the keys of ordered classes that have
// parked records of a partition owned here and that nothing blocks or
// releases here: called by the follow after it applied parked records
// (parked, their local keys), once it blocked the keys of the dead
// letters and redeliveries it applied with them.
func (rs *restorer) releaseFollowedParked(parked []snapshot.ParkedKey) {
	if len(parked) == 0 {
		return
	}
	v := recovery{state: rs.state, classes: rs.classes, order: rs.order, log: rs.log, want: rs.clog.mine}
	if err := v.releaseParked(); err != nil {
		rs.log.Error("parked records applied from the changelog not released; their keys wait for the partition's next restore", "err", err)
		return
	}
	for c, keys := range v.released {
		c.keys.startRestored(keys)
	}
}
