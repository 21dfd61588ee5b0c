//go:build race

package pool

// hammerRounds is smaller under -race, which slows every item tenfold.
const hammerRounds = 15

// batchRemoveSeeds is how many seeds TestBatchAcrossRemove runs.
const batchRemoveSeeds = 8
