package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	xfont "golang.org/x/image/font"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

var (
	sans = font.Font{Typeface: "Liberation", Variant: "Sans"}
	bold = font.Font{Typeface: "Liberation", Variant: "Sans", Weight: xfont.WeightBold}

	background = color.RGBA{0xF4, 0xF5, 0xF5, 0xFF}
	panelFill  = color.White
	border     = color.RGBA{0xD8, 0xD9, 0xDA, 0xFF}
	ink        = color.RGBA{0x24, 0x29, 0x2E, 0xFF}
	faint      = color.RGBA{0x6E, 0x76, 0x81, 0xFF}
	gridColor  = color.RGBA{0xE6, 0xE8, 0xEB, 0xFF}
	outageFill = color.NRGBA{0xF2, 0x49, 0x5C, 0x1C}
	openedLine = color.RGBA{0xD4, 0x2A, 0x3C, 0xFF}
	closedLine = color.RGBA{0x37, 0x87, 0x2D, 0xFF}

	// palette is Grafana's classic series palette, darkened where its
	// colours are too pale on white.
	palette = []color.Color{
		rgb(0x1F78C1), rgb(0xE24D42), rgb(0x508642), rgb(0xEF843C), rgb(0x705DA0),
		rgb(0xCCA300), rgb(0x0A8C8C), rgb(0xBA43A9), rgb(0x7EB26D), rgb(0x6D1F62),
	}

	// namedColors are Grafana's named colours a value mapping may use.
	namedColors = map[string]color.Color{
		"green": rgb(0x73BF69), "red": rgb(0xF2495C), "yellow": rgb(0xFADE2A), "orange": rgb(0xFF9830),
		"blue": rgb(0x5794F2), "purple": rgb(0xB877D9), "text": ink, "transparent": color.Transparent,
	}
	unmapped = rgb(0xB7BCC3)
)

func rgb(v uint32) color.Color {
	return color.RGBA{uint8(v >> 16), uint8(v >> 8), uint8(v), 0xFF}
}

func style(f font.Font, size float64, c color.Color) text.Style {
	return text.Style{Color: c, Font: font.From(f, font.Length(size)), Handler: plot.DefaultTextHandler}
}

// render draws the panels as the dashboard lays them out into a PNG.
func render(path string, width, height int, d *grafanaDashboard, panels []panelData, rec *recording) error {
	plot.DefaultFont = sans
	img := vgimg.NewWith(vgimg.UseWH(vg.Length(width), vg.Length(height)), vgimg.UseDPI(72), vgimg.UseBackgroundColor(background))
	c := draw.New(img)
	const margin, header, gap = vg.Length(10), vg.Length(58), vg.Length(8)

	// The header says what the scenario was.
	top := c.Max.Y - margin
	c.FillText(style(bold, 17, ink), vg.Point{X: margin, Y: top - 17}, fmt.Sprintf("%s — Grafana dashboard rendered from a recorded outage", d.Title))
	at := func(t time.Time) string { return fmt.Sprintf("%.1f s", t.Sub(rec.start).Seconds()) }
	c.FillText(style(sans, 12.5, faint), vg.Point{X: margin, Y: top - 38}, fmt.Sprintf(
		"The webhook turned slow at %s (it sleeps %s, timeoutSeconds is 1; red band) · the circuit opened at %s (red dashes) · the webhook recovered at %s · the circuit closed at %s (green dashes).",
		at(rec.slow), delay, at(rec.opened), at(rec.recovered), at(rec.closed)))
	c.FillText(style(sans, 11, faint), vg.Point{X: margin, Y: top - 54}, fmt.Sprintf(
		"Real kube-apiserver, webhook and guard (probes every 200ms, openAfter 3, closeAfter 3, mode Ignore), %d clients creating ConfigMaps, each every 250ms; scraped every 1 s, $__rate_interval = %s; queries from %s.",
		loadClients, rateInterval, filepath.ToSlash(dashboardPath)))

	rows := 0
	for _, p := range panels {
		rows = max(rows, p.panel.GridPos.Y+p.panel.GridPos.H)
	}
	unitW := (c.Max.X - 2*margin + gap) / 24
	unitH := (c.Max.Y - header - 2*margin + gap) / vg.Length(rows)
	for _, p := range panels {
		g := p.panel.GridPos
		r := vg.Rectangle{
			Min: vg.Point{X: margin + vg.Length(g.X)*unitW, Y: c.Max.Y - header - margin - vg.Length(g.Y+g.H)*unitH + gap},
			Max: vg.Point{X: margin + vg.Length(g.X+g.W)*unitW - gap, Y: c.Max.Y - header - margin - vg.Length(g.Y)*unitH},
		}
		drawPanel(draw.Canvas{Canvas: c.Canvas, Rectangle: r}, p, rec)
	}

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func rect(r vg.Rectangle) []vg.Point {
	return []vg.Point{r.Min, {X: r.Max.X, Y: r.Min.Y}, r.Max, {X: r.Min.X, Y: r.Max.Y}}
}

// drawPanel draws one panel: frame, title, plot and legend.
func drawPanel(c draw.Canvas, p panelData, rec *recording) {
	c.FillPolygon(panelFill, rect(c.Rectangle))
	pts := rect(c.Rectangle)
	c.StrokeLines(draw.LineStyle{Color: border, Width: 1}, append(pts, pts[0]))
	c.FillText(style(bold, 13, ink), vg.Point{X: c.Min.X + 8, Y: c.Max.Y - 17}, p.panel.Title)
	body := draw.Crop(c, 2, -8, 4, -24)

	state := p.panel.Type == "state-timeline"
	var entries []legendEntry
	if !state {
		for i, s := range p.series {
			entries = append(entries, legendEntry{s.legend, palette[i%len(palette)]})
		}
		body = drawLegend(body, entries)
	}

	pl := plot.New()
	pl.BackgroundColor = color.Transparent
	dur := rec.end.Sub(rec.start).Seconds()
	pl.X.Min, pl.X.Max = 0, dur
	pl.X.Tick.Marker = timeTicks{}
	for _, a := range []*plot.Axis{&pl.X, &pl.Y} {
		a.Tick.Label = style(sans, 10.5, faint)
		a.Tick.LineStyle.Color, a.LineStyle.Color = border, border
		a.Padding = 2
	}
	pl.X.Tick.Label.XAlign, pl.X.Tick.Label.YAlign = draw.XCenter, draw.YTop
	pl.Y.Tick.Label.XAlign, pl.Y.Tick.Label.YAlign = draw.XRight, draw.YCenter
	pl.Add(marks{rec: rec})

	if state {
		n := len(p.series)
		var ticks []plot.Tick
		for i, s := range p.series {
			ticks = append(ticks, plot.Tick{Value: float64(n - 1 - i), Label: s.legend})
		}
		pl.Y.Min, pl.Y.Max = -0.5, math.Max(float64(n)-0.5, 0.5)
		pl.Y.Tick.Marker = plot.ConstantTicks(ticks)
		pl.Y.Tick.Length = 0
		pl.Y.LineStyle.Width = 0
		pl.Add(states{series: p.series, mappings: p.panel.FieldConfig.Defaults.Mappings})
	} else {
		lo, hi := 0.0, 0.0
		for _, s := range p.series {
			for _, v := range s.values {
				if !math.IsNaN(v) && !math.IsInf(v, 0) {
					lo, hi = math.Min(lo, v), math.Max(hi, v)
				}
			}
		}
		if dflt := p.panel.FieldConfig.Defaults; dflt.Min != nil {
			lo = *dflt.Min
		}
		if dflt := p.panel.FieldConfig.Defaults; dflt.Max != nil {
			hi = *dflt.Max
		} else if hi <= lo {
			hi = lo + 1
		} else {
			hi += (hi - lo) * 0.08
		}
		pl.Y.Min, pl.Y.Max = lo, hi
		pl.Y.Tick.Marker = unitTicks{unit: p.panel.FieldConfig.Defaults.Unit}
		pl.Add(gridLines{})
		bars := p.panel.FieldConfig.Defaults.Custom.DrawStyle == "bars"
		for i, s := range p.series {
			pl.Add(line{values: s.values, color: palette[i%len(palette)], bars: bars, n: len(p.series), i: i})
		}
	}
	pl.Draw(body)
	if len(p.series) == 0 {
		dc := pl.DataCanvas(body)
		sty := style(sans, 13, faint)
		sty.XAlign, sty.YAlign = draw.XCenter, draw.YCenter
		dc.FillText(sty, dc.Center(), "No data")
	}
}

type legendEntry struct {
	text  string
	color color.Color
}

// drawLegend draws Grafana's bottom "list" legend into c and returns what
// is left above it.
func drawLegend(c draw.Canvas, entries []legendEntry) draw.Canvas {
	if len(entries) == 0 {
		return c
	}
	sty := style(sans, 11, ink)
	sty.YAlign = draw.YCenter
	const swatch, pad, rowH = vg.Length(14), vg.Length(5), vg.Length(15)
	// Lay the entries out in rows first, to know the height.
	type placed struct {
		e    legendEntry
		x    vg.Length
		row  int
		text string
	}
	var items []placed
	x, row := c.Min.X+8, 0
	for _, e := range entries {
		txt := e.text
		w := swatch + pad + sty.Width(txt)
		if x > c.Min.X+8 && x+w > c.Max.X {
			x, row = c.Min.X+8, row+1
		}
		items = append(items, placed{e: e, x: x, row: row, text: txt})
		x += w + 16
	}
	h := vg.Length(row+1)*rowH + 4
	for _, it := range items {
		y := c.Min.Y + h - rowH/2 - vg.Length(it.row)*rowH - 2
		c.StrokeLine2(draw.LineStyle{Color: it.e.color, Width: 3}, it.x, y, it.x+swatch, y)
		c.FillText(sty, vg.Point{X: it.x + swatch + pad, Y: y}, it.text)
	}
	return draw.Crop(c, 0, 0, h+2, 0)
}

// timeTicks marks seconds since the scenario's start.
type timeTicks struct{}

func (timeTicks) Ticks(lo, hi float64) []plot.Tick {
	every := 10.0
	if hi-lo <= 30 {
		every = 5
	}
	var ticks []plot.Tick
	for v := math.Ceil(lo/every) * every; v <= hi; v += every {
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64) + " s"})
	}
	return ticks
}

// unitTicks labels the y axis in a Grafana unit.
type unitTicks struct{ unit string }

func (u unitTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for _, t := range (plot.DefaultTicks{}).Ticks(lo, hi) {
		if t.Label == "" {
			continue
		}
		t.Label = formatUnit(u.unit, t.Value)
		ticks = append(ticks, t)
	}
	return ticks
}

func formatUnit(unit string, v float64) string {
	num := func(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }
	switch unit {
	case "s":
		switch {
		case v == 0:
			return "0 s"
		case math.Abs(v) < 1e-3:
			return num(v*1e6) + " µs"
		case math.Abs(v) < 1:
			return num(v*1e3) + " ms"
		}
		return num(v) + " s"
	case "ops":
		return num(v) + " ops/s"
	case "percentunit":
		return num(v*100) + "%"
	}
	return num(v)
}

// gridLines draws horizontal lines at the y ticks.
type gridLines struct{}

func (gridLines) Plot(c draw.Canvas, p *plot.Plot) {
	_, trY := p.Transforms(&c)
	for _, t := range p.Y.Tick.Marker.Ticks(p.Y.Min, p.Y.Max) {
		if t.Label == "" {
			continue
		}
		y := trY(t.Value)
		c.StrokeLine2(draw.LineStyle{Color: gridColor, Width: 1}, c.Min.X, y, c.Max.X, y)
	}
}

// marks shades the outage and draws a dashed line where the circuit opened
// and where it closed.
type marks struct{ rec *recording }

func (m marks) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	at := func(t time.Time) vg.Length { return trX(t.Sub(m.rec.start).Seconds()) }
	x0, x1 := at(m.rec.slow), at(m.rec.recovered)
	c.FillPolygon(outageFill, rect(vg.Rectangle{Min: vg.Point{X: x0, Y: c.Min.Y}, Max: vg.Point{X: x1, Y: c.Max.Y}}))
	for _, l := range []struct {
		at    time.Time
		color color.Color
	}{{m.rec.opened, openedLine}, {m.rec.closed, closedLine}} {
		x := at(l.at)
		c.StrokeLine2(draw.LineStyle{Color: l.color, Width: 1.2, Dashes: []vg.Length{4, 3}}, x, c.Min.Y, x, c.Max.Y)
	}
}

// line draws one series, one point per step, as a line broken where the
// query returned nothing, or as bars.
type line struct {
	values []float64
	color  color.Color
	bars   bool
	// n and i place a series' bars beside the others' at one step.
	n, i int
}

func (l line) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	x := func(i int) float64 { return float64(i) * step.Seconds() }
	if l.bars {
		w := 0.8 * step.Seconds() / float64(l.n)
		r, g, b, _ := l.color.RGBA()
		fill := color.NRGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), 0xB0}
		for i, v := range l.values {
			if math.IsNaN(v) || v == 0 {
				continue
			}
			left := x(i) - 0.4*step.Seconds() + float64(l.i)*w
			c.FillPolygon(fill, c.ClipPolygonXY(rect(vg.Rectangle{
				Min: vg.Point{X: trX(left), Y: trY(math.Max(p.Y.Min, 0))},
				Max: vg.Point{X: trX(left + w), Y: trY(v)},
			})))
		}
		return
	}
	sty := draw.LineStyle{Color: l.color, Width: 1.8}
	var seg []vg.Point
	flush := func() {
		switch {
		case len(seg) == 1:
			c.DrawGlyph(draw.GlyphStyle{Color: l.color, Radius: 2, Shape: draw.CircleGlyph{}}, seg[0])
		case len(seg) > 1:
			c.StrokeLines(sty, c.ClipLinesXY(seg)...)
		}
		seg = nil
	}
	for i, v := range l.values {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			flush()
			continue
		}
		seg = append(seg, vg.Point{X: trX(x(i)), Y: trY(v)})
	}
	flush()
}

// states draws a state timeline: one row per series, a band per run of
// equal values, coloured and named by the panel's value mappings.
type states struct {
	series   []series
	mappings []mapping
}

func (s states) mapped(v float64) (string, color.Color) {
	key := strconv.FormatFloat(v, 'f', -1, 64)
	for _, m := range s.mappings {
		if o, ok := m.Options[key]; ok && m.Type == "value" {
			txt := o.Text
			if txt == "" {
				txt = key
			}
			if c, ok := namedColors[o.Color]; ok {
				return txt, c
			}
			if strings.HasPrefix(o.Color, "#") {
				if v, err := strconv.ParseUint(o.Color[1:], 16, 32); err == nil {
					return txt, rgb(uint32(v))
				}
			}
			return txt, unmapped
		}
	}
	return key, unmapped
}

func (s states) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	n := len(s.series)
	sty := style(sans, 11.5, ink)
	sty.XAlign, sty.YAlign = draw.XCenter, draw.YCenter
	for i, sr := range s.series {
		y := float64(n - 1 - i)
		start := -1
		for j := 0; j <= len(sr.values); j++ {
			if start >= 0 && (j == len(sr.values) || sr.values[j] != sr.values[start] || math.IsNaN(sr.values[j])) {
				txt, col := s.mapped(sr.values[start])
				// A band runs from its first step to the next band's.
				x0, x1 := float64(start)*step.Seconds(), float64(j)*step.Seconds()
				x1 = math.Min(x1, p.X.Max)
				r := vg.Rectangle{Min: vg.Point{X: trX(x0), Y: trY(y - 0.38)}, Max: vg.Point{X: trX(x1), Y: trY(y + 0.38)}}
				c.FillPolygon(col, c.ClipPolygonXY(rect(r)))
				c.StrokeLine2(draw.LineStyle{Color: color.White, Width: 1}, r.Min.X, r.Min.Y, r.Min.X, r.Max.Y)
				if r.Max.X-r.Min.X > sty.Width(txt)+8 {
					c.FillText(sty, vg.Point{X: (r.Min.X + r.Max.X) / 2, Y: (r.Min.Y + r.Max.Y) / 2}, txt)
				}
				start = -1
			}
			if start < 0 && j < len(sr.values) && !math.IsNaN(sr.values[j]) {
				start = j
			}
		}
	}
}
