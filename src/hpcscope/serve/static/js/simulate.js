// The straggler simulator page: controls -> GET /api/simulate -> uPlot chart + table.
// Every change re-runs the simulation (debounced); a 422 from the API names the field, which
// is shown in the alert line and marked invalid on its control.
(() => {
  "use strict";
  const root = document.getElementById("simulator");
  if (!root) return;
  const $ = (id) => document.getElementById(id);
  const MODEL_SIZES_B = [0.125, 0.35, 0.635, 1.3, 2.7, 7, 13, 34, 70, 175, 405];
  const FIELD_CONTROL = {
    gpus: "gpus-max", jitter_cv: "jitter", straggler_factor: "straggler-factor",
    hiccup_probability: "hiccup-prob", hiccup_seconds: "hiccup-ms",
    model_parameters: "model-size", gpu_hour_price: "price", steps: "steps",
    pipeline_stages: "pipeline-stages", microbatches: "microbatches", alltoall_bytes: "alltoall-mb",
    expert_parallel_ranks: "ep-ranks", moe_layers: "moe-layers",
  };
  const currency = root.dataset.currency || "USD";
  const form = $("sim-form");
  const ui = {
    gpusMax: $("gpus-max"), jitter: $("jitter"), straggler: $("straggler-factor"),
    hiccupProb: $("hiccup-prob"), hiccupMs: $("hiccup-ms"), modelSize: $("model-size"),
    price: $("price"), steps: $("steps"), hiccupSlider: $("hiccup-slider"),
    priceSlider: $("price-slider"), error: $("sim-error"), status: $("sim-status"),
    chart: $("sim-chart"), tbody: document.querySelector("#sim-table tbody"),
  };
  let plot = null;
  let timer = 0;
  let controller = null;
  let requests = 0;

  const int = (n) => Math.round(n).toLocaleString("en-US");
  const fixed = (n, d) => n.toLocaleString("en-US", { minimumFractionDigits: d, maximumFractionDigits: d });

  function gpuCounts() {
    const out = [];
    for (let e = 3; e <= Number(ui.gpusMax.value); e += 1) out.push(2 ** e);
    return out;
  }

  function describe() {
    const counts = gpuCounts();
    $("gpus-max-out").textContent = `${int(counts[0])} to ${int(counts[counts.length - 1])} GPUs`;
    $("jitter-out").textContent = `${fixed(Number(ui.jitter.value), 1)} %`;
    const factor = Number(ui.straggler.value);
    $("straggler-out").textContent = factor <= 1 ? "no straggler"
      : `GPU 2's backward pass takes ${fixed(factor, 1)}x as long`;
    const billions = MODEL_SIZES_B[Number(ui.modelSize.value)];
    const params = billions >= 1 ? `${fixed(billions, billions < 10 ? 1 : 0)} B` : `${int(billions * 1000)} M`;
    $("model-size-out").textContent =
      `${params} parameters · ${fixed(billions * 2, 2)} GB bf16 gradient`;
  }

  function query() {
    const params = new URLSearchParams();
    params.set("gpus", gpuCounts().join(","));
    params.set("steps", ui.steps.value);
    params.set("jitter_cv", String(Number(ui.jitter.value) / 100));
    const factor = Number(ui.straggler.value);
    if (factor > 1) {
      params.set("straggler_gpus", "2");
      params.set("straggler_factor", String(factor));
    }
    // typed fields go as typed: the server validates and names what is wrong
    params.set("hiccup_probability", ui.hiccupProb.value.trim() || "0");
    const hiccupMs = Number(ui.hiccupMs.value.trim() || "0");
    params.set("hiccup_seconds", Number.isFinite(hiccupMs) ? String(hiccupMs / 1000) : ui.hiccupMs.value);
    params.set("model_parameters", String(MODEL_SIZES_B[Number(ui.modelSize.value)] * 1e9));
    params.set("gpu_hour_price", ui.price.value.trim() || "0");
    // expert and pipeline parallelism (the defaults leave the data-parallel model as it is)
    params.set("pipeline_stages", $("pipeline-stages").value.trim() || "1");
    params.set("microbatches", $("microbatches").value.trim() || "1");
    const megabytes = Number($("alltoall-mb").value.trim() || "0");
    params.set("alltoall_bytes", Number.isFinite(megabytes) ? String(megabytes * 1e6) : $("alltoall-mb").value);
    params.set("expert_parallel_ranks", $("ep-ranks").value.trim() || "1");
    params.set("moe_layers", $("moe-layers").value.trim() || "1");
    params.set("alltoall_overlap", $("alltoall-overlap").checked ? "true" : "false");
    return params;
  }

  function clearErrors() {
    ui.error.hidden = true;
    ui.error.textContent = "";
    form.querySelectorAll("[aria-invalid]").forEach((el) => el.removeAttribute("aria-invalid"));
  }

  function showError(field, message) {
    const control = $(FIELD_CONTROL[field] || "");
    const label = control ? form.querySelector(`label[for="${control.id}"]`) : null;
    ui.error.textContent = `${label ? label.textContent.trim() : field} (${field}): ${message}. ` +
      "The chart and the table still show the last valid settings.";
    ui.error.hidden = false;
    if (control) control.setAttribute("aria-invalid", "true");
    root.dataset.state = "error";
    ui.status.textContent = "";
    ui.chart.classList.remove("busy");
  }

  async function run() {
    describe();
    if (controller) controller.abort();
    controller = new AbortController();
    const ticket = ++requests;
    root.dataset.state = "loading";
    ui.chart.classList.add("busy");
    ui.status.textContent = "Simulating…";
    let response;
    try {
      response = await fetch(`${root.dataset.api}?${query()}`, {
        headers: { Accept: "application/json" }, signal: controller.signal,
      });
    } catch (err) {
      if (err.name === "AbortError") return;
      showError("request", `the server did not answer (${err.message})`);
      return;
    }
    let body;
    try {
      body = await response.json();
    } catch (err) {
      if (err.name === "AbortError") return;
      showError("request", `unreadable answer (HTTP ${response.status})`);
      return;
    }
    if (ticket !== requests) return;
    clearErrors();
    if (!response.ok) {
      const first = (body.detail && body.detail[0]) || {};
      const field = (first.loc || []).slice(-1)[0] || "request";
      showError(field, first.msg || `HTTP ${response.status}`);
      return;
    }
    draw(body.results);
    tabulate(body.results);
    const last = body.results[body.results.length - 1];
    ui.status.textContent = `At ${int(last.gpus)} GPUs: efficiency ${fixed(last.efficiency * 100, 1)} %, ` +
      `${int(last.lost_gpu_hours_per_day)} GPU-hours (${currency} ${int(last.lost_cost_per_day)}) lost per day.`;
    ui.chart.classList.remove("busy");
    root.dataset.state = "ready";
    root.dataset.requests = String(ticket);
  }

  function schedule() {
    describe();
    clearTimeout(timer);
    timer = setTimeout(run, 200);
  }

  function draw(results) {
    const data = [
      results.map((r) => r.gpus),
      results.map((r) => r.efficiency * 100),
      results.map((r) => r.efficiency_p95 * 100),
      results.map((r) => r.efficiency_p05 * 100),
      results.map((r) => r.barrier_wait_ratio * 100),
      results.map((r) => r.lost_gpu_hours_per_day),
    ];
    const width = Math.max(320, ui.chart.clientWidth || 640);
    if (plot) {
      plot.setData(data);
      return;
    }
    if (typeof window.uPlot !== "function") {
      showError("chart", "the chart library did not load");
      return;
    }
    plot = new window.uPlot({
      width, height: 320,
      scales: { x: { time: false, distr: 3, log: 2 }, "%": { range: [0, 100] }, h: {} },
      axes: [
        { label: "GPUs", space: 44, values: (u, ticks) => ticks.map((t) => int(t)) },
        { scale: "%", label: "%", values: (u, ticks) => ticks.map((t) => `${t} %`) },
        { scale: "h", side: 1, label: "GPU-hours lost / day", grid: { show: false },
          values: (u, ticks) => ticks.map((t) => int(t)) },
      ],
      series: [
        { label: "GPUs", value: (u, v) => (v == null ? "—" : int(v)) },
        { label: "Efficiency", scale: "%", stroke: "#15803d", width: 2,
          value: (u, v) => (v == null ? "—" : `${fixed(v, 1)} %`) },
        { label: "Fast steps (p95)", scale: "%", stroke: "rgba(21,128,61,.35)", width: 1,
          value: (u, v) => (v == null ? "—" : `${fixed(v, 1)} %`) },
        { label: "Slow steps (p5)", scale: "%", stroke: "rgba(21,128,61,.35)", width: 1,
          value: (u, v) => (v == null ? "—" : `${fixed(v, 1)} %`) },
        { label: "Barrier wait", scale: "%", stroke: "#d97706", width: 2, dash: [6, 4],
          value: (u, v) => (v == null ? "—" : `${fixed(v, 1)} %`) },
        { label: "Lost GPU-h/day", scale: "h", stroke: "#b91c1c", width: 2,
          value: (u, v) => (v == null ? "—" : int(v)) },
      ],
      bands: [{ series: [2, 3], fill: "rgba(21,128,61,.12)" }],
    }, data, ui.chart);
  }

  function tabulate(results) {
    const rows = results.map((r) => {
      const tr = document.createElement("tr");
      const cells = [
        int(r.gpus), fixed(r.step_seconds * 1e3, 2),
        `${fixed(r.step_seconds_p05 * 1e3, 1)}-${fixed(r.step_seconds_p95 * 1e3, 1)}`,
        fixed(r.allreduce_seconds * 1e3, 2), `${fixed(r.efficiency * 100, 1)} %`,
        `${fixed(r.barrier_wait_ratio * 100, 1)} %`, fixed(r.lost_gpu_hours_per_day, 1),
        int(r.lost_cost_per_day), fixed(r.alltoall_exposed_seconds * 1e3, 2),
        fixed(r.pipeline_bubble_seconds * 1e3, 2),
      ];
      cells.forEach((text) => {
        const td = document.createElement("td");
        td.className = "num";
        td.textContent = text;
        tr.appendChild(td);
      });
      tr.dataset.gpus = String(r.gpus);
      return tr;
    });
    ui.tbody.replaceChildren(...rows);
  }

  // each slider drives its field; a typed value moves the slider when it is in the slider's range
  ui.hiccupSlider.addEventListener("input", () => {
    ui.hiccupProb.value = Number((10 ** Number(ui.hiccupSlider.value)).toPrecision(2));
  });
  ui.hiccupProb.addEventListener("input", () => {
    const p = Number(ui.hiccupProb.value);
    if (p >= 1e-6 && p <= 0.1) ui.hiccupSlider.value = String(Math.log10(p));
  });
  ui.priceSlider.addEventListener("input", () => { ui.price.value = Number(ui.priceSlider.value).toFixed(2); });
  ui.price.addEventListener("input", () => {
    const price = Number(ui.price.value);
    if (price >= 0 && price <= 12) ui.priceSlider.value = String(price);
  });
  form.addEventListener("input", schedule);
  form.addEventListener("change", schedule);
  form.addEventListener("submit", (event) => { event.preventDefault(); run(); });
  let resizeTimer = 0;
  window.addEventListener("resize", () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => {
      if (plot) plot.setSize({ width: Math.max(320, ui.chart.clientWidth || 640), height: 320 });
    }, 150);
  });
  run();
})();
