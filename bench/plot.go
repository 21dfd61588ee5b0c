package main

import (
	"errors"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// The plot (gonum.org/v1/plot) has a panel per sweep (against
// partitions, against classes) side by side under one title, a line per
// rate, and a shaded ±10 % band around the mean of the runtime's handled
// rates in that sweep (the flatness goal). One legend, right of the
// panels, serves both.

var (
	blue   = color.RGBA{31, 119, 180, 255}
	orange = color.RGBA{255, 127, 14, 255}
	gray   = color.RGBA{150, 150, 150, 255}
	band   = color.RGBA{222, 240, 222, 255}
)

const plotW, plotH = 12 * vg.Inch, 4.5 * vg.Inch // 1152 × 432 px at vgimg's 96 dpi

// series is one rate drawn in every panel.
type series struct {
	name   string
	colour color.Color
	dashes []vg.Length
	radius vg.Length // of the point glyphs
	y      func(point) float64
}

// The runtime's committed line is dashed, with smaller points, and drawn
// over the handled one: the two rates are nearly equal, and a solid line
// would hide the other.
var rates = []series{
	{"raw kafka-go, handled", gray, nil, 3, func(p point) float64 { return p.raw }},
	{"runtime, handled", blue, nil, 4, func(p point) float64 { return p.handled }},
	{"runtime, committed", orange, []vg.Length{5, 3}, 2.5, func(p point) float64 { return p.committed }},
}

func writePlot(path string, sw sweepResult) error {
	var row []*plot.Plot
	leg := plot.NewLegend()
	for _, s := range []struct {
		xlabel string
		pts    []point
	}{
		{"partitions (3 topics)", sw.partitions},
		{fmt.Sprintf("classes (%d topics × 3 partitions)", sw.topics), sw.classes},
	} {
		if len(s.pts) == 0 {
			continue
		}
		l := &leg // the first panel fills the one legend
		if len(row) > 0 {
			l = nil
		}
		p, err := panel(s.xlabel, s.pts, l)
		if err != nil {
			return err
		}
		row = append(row, p)
	}
	if len(row) == 0 {
		return errors.New("plot: the sweep has no points")
	}
	top := 0.0 // one y scale for the panels, so they compare by eye
	for _, p := range row {
		top = max(top, p.Y.Max)
	}
	for _, p := range row {
		p.Y.Max = top
	}

	img := vgimg.New(plotW, plotH)
	dc := draw.New(img)
	title := draw.TextStyle{
		Color:   color.Black,
		Font:    font.From(plot.DefaultFont, 14),
		Handler: plot.DefaultTextHandler,
		XAlign:  draw.XCenter,
		YAlign:  draw.YTop,
	}
	titleH := title.Height("M") + vg.Points(12)
	dc.FillText(title, vg.Point{X: (dc.Min.X + dc.Max.X) / 2, Y: dc.Max.Y - vg.Points(6)},
		fmt.Sprintf("handoff runtime, no-op handler: msgs/s, n=%d per point, median of %d rounds", sw.n, sw.rounds))
	body := draw.Crop(dc, 0, 0, 0, -titleH)
	leg.Top, leg.Left, leg.Padding = true, true, vg.Points(4)
	legendW := leg.Rectangle(body).Size().X + vg.Points(16)
	panels := draw.Crop(body, 0, -legendW, 0, 0)
	tiles := draw.Tiles{Rows: 1, Cols: len(row), PadX: vg.Points(16), PadLeft: vg.Points(4), PadBottom: vg.Points(4)}
	for i, c := range plot.Align([][]*plot.Plot{row}, tiles, panels)[0] {
		row[i].Draw(c)
	}
	leg.Draw(draw.Crop(body, body.Size().X-legendW+vg.Points(12), 0, 0, -vg.Points(12)))

	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = vgimg.PngCanvas{Canvas: img}.WriteTo(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// panel returns the chart of one sweep, with the points' x evenly spaced
// in order and y from 0. With leg non-nil it adds what it draws to leg.
func panel(xlabel string, pts []point, leg *plot.Legend) (*plot.Plot, error) {
	p := plot.New()
	p.X.Label.Text = xlabel
	p.Y.Label.Text = "messages/s"
	p.Y.Min = 0
	p.Y.Tick.Marker = thousands{}
	names := make([]string, len(pts))
	for i, pt := range pts {
		names[i] = strconv.Itoa(pt.x)
	}
	p.NominalX(names...)

	m := mean(pts)
	lo, hi := -0.5, float64(len(pts))-0.5
	flat, err := plotter.NewPolygon(plotter.XYs{{X: lo, Y: 0.9 * m}, {X: hi, Y: 0.9 * m}, {X: hi, Y: 1.1 * m}, {X: lo, Y: 1.1 * m}})
	if err != nil {
		return nil, err
	}
	flat.Color, flat.LineStyle.Width = band, 0
	grid := plotter.NewGrid()
	grid.Vertical.Width = 0
	p.Add(flat, grid)
	if leg != nil {
		leg.Add("±10 % of the mean runtime handled", flat)
	}

	ymax := 0.0
	for _, s := range rates {
		xys := make(plotter.XYs, len(pts))
		for i, pt := range pts {
			xys[i] = plotter.XY{X: float64(i), Y: s.y(pt)}
			ymax = max(ymax, xys[i].Y)
		}
		l, sc, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, err
		}
		l.Color, l.Width, l.Dashes = s.colour, vg.Points(2), s.dashes
		sc.Color, sc.Shape, sc.Radius = s.colour, draw.CircleGlyph{}, s.radius
		p.Add(l, sc)
		if leg != nil {
			leg.Add(s.name, l, sc)
		}
	}
	p.Y.Max = 1.15 * max(ymax, 1.1*m)
	return p, nil
}

// thousands is the default y ticks labelled in thousands (1200k).
type thousands struct{}

func (thousands) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = strconv.FormatFloat(ts[i].Value/1000, 'f', -1, 64) + "k"
		}
	}
	return ts
}
