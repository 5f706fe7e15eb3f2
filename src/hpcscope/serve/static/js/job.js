// Job page: per-GPU reported utilization (dashed) and real efficiency (solid) over time.
// Data comes downsampled from /api/jobs/<id>/timeseries; uPlot is vendored (no CDN).
(function () {
  "use strict";
  const el = document.getElementById("job-chart");
  if (!el || typeof uPlot === "undefined") return;
  const jobId = el.dataset.jobId;
  const palette = ["#1d4ed8", "#b91c1c", "#15803d", "#a16207", "#7c3aed", "#0e7490", "#be185d", "#4d7c0f",
                   "#1e3a8a", "#7f1d1d", "#14532d", "#713f12", "#4c1d95", "#164e63", "#831843", "#365314"];

  const note = document.getElementById("job-chart-note");
  const day = (t) => new Date(t * 1000).toISOString().replace("T", " ").slice(0, 16) + " UTC";

  // Dropped data is said, never drawn as a zero or an empty chart.
  function explain(data, empty) {
    const gone = data.out_of_retention || [];
    const parts = [];
    if (data.source === "rollup") parts.push("Means of 1-minute rollups.");
    if (gone.length && !empty) {
      parts.push("Out of retention: " + gone.map((g) => `${day(g.start)} – ${day(g.end)}`).join(", ") +
                 " (samples dropped; the figures above come from the job's summary).");
    }
    if (note && parts.length) { note.textContent = parts.join(" "); note.hidden = false; }
  }

  function build(data) {
    const series = data.series || [];
    if (series.length === 0) {
      const gone = data.out_of_retention || [];
      if (gone.length) {
        el.textContent = "Out of retention: the samples and rollups of this job were dropped. " +
          (el.dataset.source === "summary" ? "The figures above come from its kept summary." : "");
        el.classList.add("out-of-retention");
      } else {
        el.textContent = "No samples yet.";
      }
      return;
    }
    explain(data, false);
    const times = Array.from(new Set(series.flatMap((s) => s.t))).sort((a, b) => a - b);
    const index = new Map(times.map((t, i) => [t, i]));
    const columns = [times];
    const config = [{}];
    const aggregate = series.length > 16;
    function aligned(s, key) {
      const out = new Array(times.length).fill(null);
      s.t.forEach((t, i) => { const v = s[key][i]; out[index.get(t)] = v === null ? null : v * 100; });
      return out;
    }
    if (aggregate) {
      for (const [key, label, dash] of [["sm_active_ratio", "real (SM active), mean of GPUs", null],
                                        ["reported_util_ratio", "reported util, mean of GPUs", [6, 4]]]) {
        const all = series.map((s) => aligned(s, key));
        columns.push(times.map((_, i) => {
          const vals = all.map((a) => a[i]).filter((v) => v !== null);
          return vals.length ? vals.reduce((a, b) => a + b, 0) / vals.length : null;
        }));
        config.push({ label, stroke: dash ? "#64748b" : "#1d4ed8", width: 2, dash: dash || undefined,
                      value: (u, v) => v === null ? "—" : v.toFixed(0) + " %" });
      }
    } else {
      series.forEach((s, i) => {
        const colour = palette[i % palette.length];
        columns.push(aligned(s, "sm_active_ratio"));
        config.push({ label: `${s.node} GPU ${s.gpu} real`, stroke: colour, width: 2,
                      value: (u, v) => v === null ? "—" : v.toFixed(0) + " %" });
        columns.push(aligned(s, "reported_util_ratio"));
        config.push({ label: `${s.node} GPU ${s.gpu} util`, stroke: colour, width: 1, dash: [6, 4],
                      value: (u, v) => v === null ? "—" : v.toFixed(0) + " %" });
      });
    }
    const width = Math.max(320, el.clientWidth || 800);
    const opts = {
      width, height: 300,
      scales: { y: { range: [0, 100] } },
      axes: [{}, { label: "% (ratio × 100)", values: (u, ticks) => ticks.map((v) => v + " %") }],
      series: config,
    };
    el.textContent = "";
    new uPlot(opts, columns, el);
  }

  fetch(`/api/jobs/${encodeURIComponent(jobId)}/timeseries`, { credentials: "same-origin" })
    .then((r) => r.ok ? r.json() : Promise.reject(new Error(`HTTP ${r.status}`)))
    .then(build)
    .catch((err) => { el.textContent = `Could not load the time series (${err.message}).`; });
})();
