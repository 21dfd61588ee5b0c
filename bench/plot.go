package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// The plot is drawn with the standard library alone: two panels (against
// partitions, against classes), a line per rate, a shaded ±10 % band
// around the mean of the runtime's handled rates (the flatness goal), and
// a 3×5 pixel font for the few labels.

var (
	white    = color.RGBA{255, 255, 255, 255}
	ink      = color.RGBA{40, 40, 40, 255}
	grid     = color.RGBA{225, 225, 225, 255}
	band     = color.RGBA{222, 240, 222, 255}
	blue     = color.RGBA{31, 119, 180, 255}
	orange   = color.RGBA{255, 127, 14, 255}
	gray     = color.RGBA{150, 150, 150, 255}
	panelW   = 420
	panelH   = 300
	fontSize = 2 // pixels per font dot
)

func writePlot(path string, sw sweepResult) error {
	img := image.NewRGBA(image.Rect(0, 0, 2*panelW, panelH+40))
	draw.Draw(img, img.Bounds(), &image.Uniform{white}, image.Point{}, draw.Src)
	title := fmt.Sprintf("HANDOFF RUNTIME NO-OP MSGS/S, N=%d, MEDIAN OF %d", sw.n, sw.rounds)
	text(img, 12, 10, title, ink)
	legendY := 26
	fill(img, 12, legendY+2, 20, 4, blue)
	text(img, 38, legendY, "HANDLED", ink)
	fill(img, 130, legendY+2, 20, 4, orange)
	text(img, 156, legendY, "COMMITTED", ink)
	fill(img, 270, legendY+2, 20, 4, gray)
	text(img, 296, legendY, "RAW KAFKA-GO", ink)
	fill(img, 430, legendY, 20, 10, band)
	text(img, 456, legendY, "+-10% OF MEAN HANDLED", ink)
	top := 40
	panel(img, image.Rect(0, top, panelW, top+panelH), "PARTITIONS", sw.partitions)
	panel(img, image.Rect(panelW, top, 2*panelW, top+panelH), fmt.Sprintf("CLASSES (%d TOPICS)", sw.topics), sw.classes)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = png.Encode(f, img)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// panel draws one chart in r: x is the points' x (evenly spaced, in
// order), y from 0 to a round maximum, in thousands.
func panel(img *image.RGBA, r image.Rectangle, xlabel string, pts []point) {
	if len(pts) == 0 {
		return
	}
	left, right, top, bottom := r.Min.X+60, r.Max.X-20, r.Min.Y+10, r.Max.Y-40
	ymax := 0.0
	for _, p := range pts {
		ymax = max(ymax, p.handled, p.committed, p.raw)
	}
	step := niceStep(ymax * 1.15 / 4)
	ymax = step * math.Ceil(ymax*1.15/step)
	ypix := func(v float64) int { return bottom - int(math.Round(v/ymax*float64(bottom-top))) }
	xpix := func(i int) int {
		if len(pts) == 1 {
			return (left + right) / 2
		}
		return left + 20 + i*(right-left-40)/(len(pts)-1)
	}

	m := mean(pts)
	lo, hi := ypix(m*1.1), ypix(m*0.9)
	fill(img, left, max(lo, top), right-left, min(hi, bottom)-max(lo, top), band)
	for v := 0.0; v <= ymax+step/2; v += step {
		y := ypix(v)
		hline(img, left, right, y, grid)
		lbl := fmt.Sprintf("%.0fK", v/1000)
		text(img, left-8-textWidth(lbl), y-5, lbl, ink)
	}
	hline(img, left, right, bottom, ink)
	vline(img, left, top, bottom, ink)
	for i, p := range pts {
		lbl := fmt.Sprint(p.x)
		text(img, xpix(i)-textWidth(lbl)/2, bottom+6, lbl, ink)
	}
	text(img, (left+right)/2-textWidth(xlabel)/2, bottom+22, xlabel, ink)

	for _, s := range []struct {
		c color.RGBA
		y func(point) float64
	}{{gray, func(p point) float64 { return p.raw }}, {orange, func(p point) float64 { return p.committed }}, {blue, func(p point) float64 { return p.handled }}} {
		for i, p := range pts {
			x, y := xpix(i), ypix(s.y(p))
			if i > 0 {
				line(img, xpix(i-1), ypix(s.y(pts[i-1])), x, y, s.c)
			}
			fill(img, x-3, y-3, 7, 7, s.c)
		}
	}
}

// niceStep rounds v up to 1, 2 or 5 × a power of ten.
func niceStep(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func fill(img *image.RGBA, x, y, w, h int, c color.RGBA) {
	draw.Draw(img, image.Rect(x, y, x+w, y+h), &image.Uniform{c}, image.Point{}, draw.Src)
}

func hline(img *image.RGBA, x0, x1, y int, c color.RGBA) { fill(img, x0, y, x1-x0+1, 1, c) }
func vline(img *image.RGBA, x, y0, y1 int, c color.RGBA) { fill(img, x, y0, 1, y1-y0+1, c) }

// line draws a 2-pixel-wide segment (Bresenham).
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := 1, 1
	if x0 > x1 {
		sx = -1
	}
	if y0 > y1 {
		sy = -1
	}
	e := dx + dy
	for {
		fill(img, x0, y0, 2, 2, c)
		if x0 == x1 && y0 == y1 {
			return
		}
		if e2 := 2 * e; e2 >= dy {
			e += dy
			x0 += sx
		} else {
			e += dx
			y0 += sy
		}
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

// glyphs is a 3×5 font (M, N wider) for the plot's labels: rows of dots.
var glyphs = map[rune][5]string{
	'0': {"111", "101", "101", "101", "111"}, '1': {"010", "110", "010", "010", "111"},
	'2': {"111", "001", "111", "100", "111"}, '3': {"111", "001", "111", "001", "111"},
	'4': {"101", "101", "111", "001", "001"}, '5': {"111", "100", "111", "001", "111"},
	'6': {"111", "100", "111", "101", "111"}, '7': {"111", "001", "001", "001", "001"},
	'8': {"111", "101", "111", "101", "111"}, '9': {"111", "101", "111", "001", "111"},
	'A': {"010", "101", "111", "101", "101"}, 'B': {"110", "101", "110", "101", "110"},
	'C': {"111", "100", "100", "100", "111"}, 'D': {"110", "101", "101", "101", "110"},
	'E': {"111", "100", "110", "100", "111"}, 'F': {"111", "100", "110", "100", "100"},
	'G': {"111", "100", "101", "101", "111"}, 'H': {"101", "101", "111", "101", "101"},
	'I': {"111", "010", "010", "010", "111"}, 'J': {"001", "001", "001", "101", "111"},
	'K': {"101", "101", "110", "101", "101"},
	'L': {"100", "100", "100", "100", "111"}, 'M': {"10001", "11011", "10101", "10001", "10001"},
	'N': {"1001", "1101", "1011", "1001", "1001"}, 'O': {"111", "101", "101", "101", "111"},
	'P': {"111", "101", "111", "100", "100"}, 'Q': {"111", "101", "101", "111", "001"},
	'R': {"110", "101", "110", "101", "101"},
	'S': {"111", "100", "111", "001", "111"}, 'T': {"111", "010", "010", "010", "010"},
	'U': {"101", "101", "101", "101", "111"}, 'V': {"101", "101", "101", "101", "010"},
	'W': {"10001", "10001", "10101", "11011", "10001"}, 'X': {"101", "101", "010", "101", "101"}, 'Y': {"101", "101", "010", "010", "010"},
	'Z': {"111", "001", "010", "100", "111"},
	'/': {"001", "001", "010", "100", "100"}, '-': {"000", "000", "111", "000", "000"},
	'+': {"000", "010", "111", "010", "000"}, '%': {"101", "001", "010", "100", "101"},
	'.': {"0", "0", "0", "0", "1"}, ',': {"0", "0", "0", "1", "1"},
	'=': {"000", "111", "000", "111", "000"}, '(': {"01", "10", "10", "10", "01"},
	')': {"10", "01", "01", "01", "10"}, ' ': {"00", "00", "00", "00", "00"},
}

func textWidth(s string) int {
	w := 0
	for _, r := range strings.ToUpper(s) {
		w += (len(glyphs[r][0]) + 1) * fontSize
	}
	return w
}

// text draws s (upper-cased; unknown runes are blank) with its top-left
// corner at x, y.
func text(img *image.RGBA, x, y int, s string, c color.RGBA) {
	for _, r := range strings.ToUpper(s) {
		g := glyphs[r]
		for row, bits := range g {
			for col, b := range bits {
				if b == '1' {
					fill(img, x+col*fontSize, y+row*fontSize, fontSize, fontSize, c)
				}
			}
		}
		x += (len(g[0]) + 1) * fontSize
	}
}
