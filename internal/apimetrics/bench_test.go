package apimetrics

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// realMetrics is kube-apiserver v1.37.2's /metrics, captured after the
// partition e2e tests' webhook traffic (WEBHOOK_GUARD_CAPTURE_METRICS).
func realMetrics(tb testing.TB) []byte {
	tb.Helper()
	data := gunzipTestdata(tb, "kube-apiserver-v1.37.2-metrics.txt.gz")
	return data
}

func realWant(tb testing.TB, data []byte) map[Webhook]bool {
	tb.Helper()
	want := map[Webhook]bool{}
	for line := range strings.SplitSeq(string(data), "\n") {
		if strings.HasPrefix(line, RequestTotal+"{") {
			i := strings.Index(line, `name="`) + len(`name="`)
			name := line[i : i+strings.Index(line[i:], `"`)]
			want[Webhook{Name: name, Type: Mutating}] = true
		}
	}
	if len(want) == 0 {
		tb.Fatal("the capture has no webhook calls")
	}
	return want
}

func TestParse_aRealApiserversMetrics(t *testing.T) {
	data := realMetrics(t)
	want := realWant(t, data)
	s, err := Parse(bytes.NewReader(data), want)
	if err != nil {
		t.Fatal(err)
	}
	if s.Instance == 0 {
		t.Error("no process_start_time_seconds in a real apiserver's metrics")
	}
	for wh := range want {
		if s.Webhooks[wh].Calls == 0 {
			t.Errorf("%v: no calls parsed", wh)
		}
	}
	t.Logf("%d bytes, %d webhooks", len(data), len(s.Webhooks))
}

// BenchmarkParse_realApiserver is the scrape's cost on this side: reading
// and parsing a real v1.37 apiserver's /metrics for the webhooks it
// called. BenchmarkParse_realApiserverUnfiltered parses everything with
// the same Prometheus parser, for comparison.
func BenchmarkParse_realApiserver(b *testing.B) {
	data := realMetrics(b)
	want := realWant(b, data)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(bytes.NewReader(data), want); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParse_realApiserverUnfiltered(b *testing.B) {
	data := realMetrics(b)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		p := expfmt.NewTextParser(model.UTF8Validation)
		if _, err := p.TextToMetricFamilies(bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFilter_realApiserver is the line filter alone on a real
// apiserver's metrics; BenchmarkFilter_realApiserverLineByLine is the
// same filter without familySet.mayHold (every line delimited and looked
// up), for the ratio, side by side in one run.
func BenchmarkFilter_realApiserver(b *testing.B) {
	data := realMetrics(b)
	sel := newSelector(realWant(b, data))
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := filter(bytes.NewReader(data), families, sel); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFilter_realApiserverLineByLine(b *testing.B) {
	data := realMetrics(b)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 0, 4096), maxLine)
		var out bytes.Buffer
		for sc.Scan() {
			if line := sc.Bytes(); referenceFamily(line, families.names) != "" {
				out.Write(line)
				out.WriteByte('\n')
			}
		}
		if sc.Err() != nil {
			b.Fatal(sc.Err())
		}
	}
}

// named is the answer to Scraper's request (name[] of Families) from a
// kube-apiserver v1.37.2 with 200 CRDs that had called 1,000 webhooks
// (hack/bench, section scrape): 153 KB, 1,008 lines.
func named(tb testing.TB) ([]byte, map[Webhook]bool) {
	tb.Helper()
	data := gunzipTestdata(tb, "kube-apiserver-v1.37.2-1000-webhooks-name-filtered.txt.gz")
	want := map[Webhook]bool{}
	for wh := range realWant(tb, data) {
		if len(want) < 10 {
			want[wh] = true
		}
	}
	return data, want
}

// BenchmarkRead_1000WebhooksAsked10 is the guard's cost per scrape with
// 10 targets in a cluster of 1,000 webhooks, as Scraper reads it now;
// BenchmarkRead_1000WebhooksAsked10WithoutSelector is the same without
// dropping the other 990 webhooks' samples before the text parser.
func BenchmarkRead_1000WebhooksAsked10(b *testing.B) {
	data, want := named(b)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if s, err := Read(bytes.NewReader(data), want, ParseOptions{}); err != nil || len(s.Webhooks) != len(want) {
			b.Fatal(err, len(s.Webhooks))
		}
	}
}

func BenchmarkRead_1000WebhooksAsked10WithoutSelector(b *testing.B) {
	data, want := named(b)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if s, err := read(bytes.NewReader(data), want, ParseOptions{}, nil); err != nil || len(s.Webhooks) != len(want) {
			b.Fatal(err, len(s.Webhooks))
		}
	}
}

// gunzipTestdata returns the gzipped testdata file name, uncompressed.
func gunzipTestdata(tb testing.TB, name string) []byte {
	tb.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	zr, err := gzip.NewReader(f)
	if err != nil {
		tb.Fatal(err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		tb.Fatal(err)
	}
	return data
}
