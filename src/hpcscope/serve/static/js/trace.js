// Trace analysis page: busy time (step minus barrier wait) per step for every rank, and the
// step time. Data from /api/traces/<id> (its "chart" part); uPlot is vendored (no CDN).
(function () {
  "use strict";
  const el = document.getElementById("trace-chart");
  if (!el || typeof uPlot === "undefined") return;
  const id = el.dataset.analysisId;
  const palette = ["#1d4ed8", "#15803d", "#a16207", "#7c3aed", "#0e7490", "#be185d", "#4d7c0f", "#1e3a8a"];
  const ms = (u, v) => (v === null || v === undefined ? "—" : v.toFixed(2) + " ms");

  function byRank(chart, ranks) {
    // one or two steps: a bar per rank (x = rank), one bar series per step
    const stragglers = new Set(chart.stragglers);
    const columns = [ranks.map(Number)];
    const series = [{ label: "rank" }];
    const bars = uPlot.paths && uPlot.paths.bars ? uPlot.paths.bars({ size: [0.6, 60] }) : undefined;
    chart.steps.forEach((step, i) => {
      columns.push(ranks.map((r) => chart.busy_ms[r][i]));
      series.push({ label: `step ${step} busy`, stroke: palette[i % palette.length],
                    fill: palette[i % palette.length] + "55", width: 1, paths: bars, value: ms });
    });
    return { columns, series, x: `rank (straggler: ${[...stragglers].join(", ") || "none"})` };
  }

  function build(chart) {
    const steps = chart.steps || [];
    if (steps.length === 0) { el.textContent = "No step to plot."; return; }
    const ranks = Object.keys(chart.busy_ms);
    if (steps.length < 3) {
      const view = byRank(chart, ranks);
      const reduce = window.matchMedia && window.matchMedia("(prefers-reduced-motion: reduce)").matches;
      el.textContent = "";
      new uPlot({
        width: Math.max(320, el.clientWidth || 800), height: 300,
        cursor: { drag: { x: !reduce, y: false } },
        scales: { x: { time: false, range: (u, lo, hi) => [lo - 0.5, hi + 0.5] }, y: { range: (u, lo, hi) => [0, hi * 1.05] } },
        axes: [{ label: view.x, splits: () => ranks.map(Number) },
               { label: "busy milliseconds", values: (u, t) => t.map((v) => v + " ms") }],
        series: view.series,
      }, view.columns, el);
      return;
    }
    const stragglers = new Set(chart.stragglers);
    const columns = [steps, chart.step_ms];
    const series = [{ label: "step" }, { label: "step time", stroke: "#64748b", width: 2, dash: [6, 4], value: ms }];
    if (ranks.length > 16) {
      // many ranks: the median and the extremes of busy time, plus each straggler
      const at = (i) => ranks.map((r) => chart.busy_ms[r][i]).sort((a, b) => a - b);
      columns.push(steps.map((_, i) => at(i)[0]));
      series.push({ label: "fastest rank", stroke: "#94a3b8", width: 1, value: ms });
      columns.push(steps.map((_, i) => { const v = at(i); return v[Math.floor(v.length / 2)]; }));
      series.push({ label: "median rank", stroke: "#1d4ed8", width: 2, value: ms });
      columns.push(steps.map((_, i) => { const v = at(i); return v[v.length - 1]; }));
      series.push({ label: "slowest rank", stroke: "#f97316", width: 1, value: ms });
      for (const r of stragglers) {
        columns.push(chart.busy_ms[r]);
        series.push({ label: `rank ${r} (straggler)`, stroke: "#b91c1c", width: 3, value: ms });
      }
    } else {
      ranks.forEach((r, i) => {
        columns.push(chart.busy_ms[r]);
        const slow = stragglers.has(r);
        series.push({ label: `rank ${r}${slow ? " (straggler)" : ""}`, stroke: slow ? "#b91c1c" : palette[i % palette.length],
                      width: slow ? 3 : 1.5, value: ms });
      });
    }
    const reduce = window.matchMedia && window.matchMedia("(prefers-reduced-motion: reduce)").matches;
    const opts = {
      width: Math.max(320, el.clientWidth || 800), height: 300,
      cursor: { drag: { x: !reduce, y: false } },
      scales: { x: { time: false } },
      axes: [{ label: "profiler step" }, { label: "milliseconds", values: (u, t) => t.map((v) => v + " ms") }],
      series,
    };
    el.textContent = "";
    new uPlot(opts, columns, el);
  }

  fetch(`/api/traces/${encodeURIComponent(id)}`, { credentials: "same-origin" })
    .then((r) => (r.ok ? r.json() : Promise.reject(new Error(`HTTP ${r.status}`))))
    .then((data) => build(data.chart))
    .catch((err) => { el.textContent = `Could not load the chart (${err.message}).`; });
})();
