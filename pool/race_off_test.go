//go:build !race

package pool

// hammerRounds is smaller under -race, which slows every item tenfold.
const hammerRounds = 60
