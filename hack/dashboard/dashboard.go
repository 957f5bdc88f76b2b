package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
)

// grafanaDashboard is the part of a Grafana dashboard this program reads.
type grafanaDashboard struct {
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name string `json:"name"`
			Type string `json:"type"`
		} `json:"list"`
	} `json:"templating"`
	path string
}

type panel struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	GridPos struct {
		X, Y, W, H int
	} `json:"gridPos"`
	Targets []struct {
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
		Hide         bool   `json:"hide"`
	} `json:"targets"`
	FieldConfig struct {
		Defaults struct {
			Unit     string    `json:"unit"`
			Min      *float64  `json:"min"`
			Max      *float64  `json:"max"`
			Mappings []mapping `json:"mappings"`
			Custom   struct {
				DrawStyle string `json:"drawStyle"`
			} `json:"custom"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Panels []panel `json:"panels"` // in a collapsed row
}

// mapping is a Grafana value mapping of type "value".
type mapping struct {
	Type    string `json:"type"`
	Options map[string]struct {
		Text  string `json:"text"`
		Color string `json:"color"`
	} `json:"options"`
}

func loadDashboard(path string) (*grafanaDashboard, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	d := &grafanaDashboard{path: path}
	if err := json.Unmarshal(data, d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	// Panels inside collapsed rows are drawn as if expanded.
	var flat []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type != "row" {
				flat = append(flat, p)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	d.Panels = flat
	if len(d.Panels) == 0 {
		return nil, fmt.Errorf("%s has no panels", path)
	}
	return d, nil
}

// promqlParser is Prometheus's PromQL parser with its default options.
var promqlParser = parser.NewParser(parser.Options{})

// rateInterval stands for Grafana's $__rate_interval: four scrape
// intervals at least, as Grafana computes it, plus one.
const rateInterval = "5s"

// step is the query resolution: the scrape interval.
const step = time.Second

// expr substitutes Grafana's variables in a panel query: the built-in
// intervals, and each dashboard variable as its "All" value (".*").
func (d *grafanaDashboard) expr(q string) string {
	q = strings.NewReplacer("$__rate_interval", rateInterval, "${__rate_interval}", rateInterval,
		"$__interval", "1s", "${__interval}", "1s", "$__range", "1m", "${__range}", "1m").Replace(q)
	for _, v := range d.Templating.List {
		if v.Type == "datasource" {
			continue
		}
		q = regexp.MustCompile(`\$\{`+regexp.QuoteMeta(v.Name)+`(:[a-z]+)?\}|\$`+regexp.QuoteMeta(v.Name)+`\b|\[\[`+regexp.QuoteMeta(v.Name)+`\]\]`).ReplaceAllString(q, ".*")
	}
	return q
}

// needsAPIServer says whether a panel reads kube-apiserver's own series
// (apiserver_*), which the scenario then scrapes too.
func (d *grafanaDashboard) needsAPIServer() bool {
	for _, p := range d.Panels {
		for _, t := range p.Targets {
			e, err := promqlParser.ParseExpr(d.expr(t.Expr))
			if err != nil {
				continue
			}
			found := false
			parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
				if vs, ok := n.(*parser.VectorSelector); ok && strings.HasPrefix(vs.Name, "apiserver_") {
					found = true
				}
				return nil
			})
			if found {
				return true
			}
		}
	}
	return false
}

// series is one line of a panel: its legend and its points (NaN where
// the query returned nothing), one per step from the recording's start.
type series struct {
	legend string
	values []float64
}

// panelData is a panel's evaluated targets.
type panelData struct {
	panel  panel
	series []series
}

// evaluate runs every panel's targets over the recording's range with
// Prometheus's engine.
func (d *grafanaDashboard) evaluate(ctx context.Context, s *store, rec *recording) ([]panelData, error) {
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 50_000_000, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	n := int(rec.end.Sub(rec.start)/step) + 1
	var out []panelData
	for _, p := range d.Panels {
		pd := panelData{panel: p}
		for _, t := range p.Targets {
			if t.Hide || t.Expr == "" {
				continue
			}
			q := d.expr(t.Expr)
			query, err := engine.NewRangeQuery(ctx, s, nil, q, rec.start, rec.start.Add(time.Duration(n-1)*step), step)
			if err != nil {
				return nil, fmt.Errorf("panel %q: %s: %w", p.Title, q, err)
			}
			res := query.Exec(ctx)
			if res.Err != nil {
				query.Close()
				return nil, fmt.Errorf("panel %q: %s: %w", p.Title, q, res.Err)
			}
			m, err := res.Matrix()
			if err != nil {
				query.Close()
				return nil, fmt.Errorf("panel %q: %s: %w", p.Title, q, err)
			}
			var found []series
			for _, sr := range m {
				v := make([]float64, n)
				for i := range v {
					v[i] = math.NaN()
				}
				for _, pt := range sr.Floats {
					if i := int((pt.T - rec.start.UnixMilli() + step.Milliseconds()/2) / step.Milliseconds()); i >= 0 && i < n {
						v[i] = pt.F
					}
				}
				found = append(found, series{legend: legend(t.LegendFormat, sr.Metric.Map()), values: v})
			}
			sort.SliceStable(found, func(i, j int) bool { return found[i].legend < found[j].legend })
			pd.series = append(pd.series, found...)
			query.Close()
		}
		say("panel %q: %d series", p.Title, len(pd.series))
		out = append(out, pd)
	}
	return out, nil
}

var legendLabel = regexp.MustCompile(`\{\{\s*(.+?)\s*\}\}`)

// legend formats a series name as Grafana does from a legendFormat.
func legend(format string, ls map[string]string) string {
	if format == "" || format == "__auto" {
		var parts []string
		for k, v := range ls {
			if k != "__name__" {
				parts = append(parts, fmt.Sprintf("%s=%q", k, v))
			}
		}
		sort.Strings(parts)
		return ls["__name__"] + "{" + strings.Join(parts, ", ") + "}"
	}
	return strings.TrimSpace(legendLabel.ReplaceAllStringFunc(format, func(m string) string {
		return ls[legendLabel.FindStringSubmatch(m)[1]]
	}))
}
