// The step player: one training step of every GPU, drawn to scale from /api/step.
// Lanes fill up as the playhead moves; the ring shows the chunks of the ring AllReduce moving
// from GPU to GPU (NVLink hops inside a node, InfiniBand hops between nodes).
// Keyboard: Space/K play-pause, ←/J and →/L previous/next event, R/Home replay, S straggler,
// E expert mode (MoE step from /api/step/expert: the all-to-all on a second stream under the
// GEMMs, the exposed remainder on the compute stream), O overlap on/off in expert mode.
// With prefers-reduced-motion the player shows the whole step and moves event by event.
(() => {
  "use strict";
  const root = document.getElementById("player");
  if (!root) return;
  const SVGNS = "http://www.w3.org/2000/svg";
  const SLOW_MOTION = 6; // the AllReduce plays this many times slower
  const PHASE_NAMES = {
    data_load: "data load", forward: "forward", backward: "backward", other: "other work",
    hiccup: "hiccup", barrier_wait: "waiting at the barrier", allreduce: "AllReduce",
    optimizer: "optimizer", idle: "done", alltoall_exposed: "all-to-all exposed",
    ep_wait: "waiting for the expert group",
  };
  const reducedMotion = window.matchMedia("(prefers-reduced-motion: reduce)");
  const $ = (id) => document.getElementById(id);
  const ui = {
    play: $("play"), back: $("step-back"), forward: $("step-forward"), replay: $("replay"),
    stragglerOn: $("straggler-on"), stragglerGpu: $("straggler-gpu"), speed: $("speed"),
    status: $("player-status"), error: $("player-error"), timeline: $("timeline"), ring: $("ring"),
    ringCaption: $("ring-caption"), mode: $("mode"), overlapOn: $("overlap-on"),
  };
  const state = {
    data: null, scenario: "straggler", t: 0, playing: false, last: null, raf: 0,
    events: [], rects: [], chunks: [], lastStatus: "", request: 0,
    mode: root.dataset.mode === "expert" ? "expert" : "data",
  };
  const expert = () => state.mode === "expert";

  function svg(name, attrs, parent) {
    const node = document.createElementNS(SVGNS, name);
    for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
    if (parent) parent.appendChild(node);
    return node;
  }
  const ms = (seconds, digits = 1) => `${(seconds * 1e3).toFixed(digits)} ms`;
  const pct = (ratio) => `${(ratio * 100).toFixed(1)} %`;
  const current = () => state.data[state.scenario];
  const endTime = () => current().step_seconds;
  const scaleEnd = () => Math.max(state.data.healthy.step_seconds, state.data.straggler.step_seconds);

  // ---------------------------------------------------------------- data
  async function load() {
    const gpu = ui.stragglerGpu.value;
    const ticket = ++state.request;
    root.dataset.state = "loading";
    ui.error.hidden = true;
    let response;
    try {
      const query = new URLSearchParams({ straggler_gpu: gpu });
      if (expert()) query.set("alltoall_overlap", ui.overlapOn.checked ? "true" : "false");
      const api = expert() ? root.dataset.expertApi : root.dataset.api;
      response = await fetch(`${api}?${query}`, { headers: { Accept: "application/json" } });
    } catch (err) {
      showError(`Could not reach the server: ${err.message}`);
      return;
    }
    if (ticket !== state.request) return; // a newer request is on its way
    const body = await response.json();
    if (!response.ok) {
      const first = (body.detail && body.detail[0]) || {};
      showError(`${(first.loc || []).slice(-1)[0] || "request"}: ${first.msg || response.status}`);
      return;
    }
    state.data = body;
    root.dataset.stragglerGpu = gpu;
    root.dataset.mode = state.mode;
    root.dataset.overlap = expert() && body.alltoall.overlapped ? "on" : "off";
    document.querySelectorAll("[data-expert-only]").forEach((el) => { el.hidden = !expert(); });
    build();
    if (reducedMotion.matches) {
      seek(endTime());
      pause();
    } else {
      seek(0);
      play();
    }
  }

  function showError(message) {
    ui.error.textContent = message;
    ui.error.hidden = false;
    root.dataset.state = "error";
  }

  // ---------------------------------------------------------------- layout
  function build() {
    buildTimeline();
    buildRing();
    buildEvents();
    summarize();
  }

  function buildTimeline() {
    const data = state.data;
    const lanes = current().lanes;
    const labels = data.cluster.labels;
    const width = Math.max(ui.timeline.parentElement.clientWidth || 720, 640);
    const left = 150, right = 16, top = 28, laneHeight = expert() ? 30 : 22, gap = 4;
    const computeHeight = expert() ? 17 : laneHeight - gap;
    const nodeGap = 10;
    const perNode = data.cluster.gpus_per_node;
    const plot = width - left - right;
    const x = (t) => left + (t / scaleEnd()) * plot;
    const y = (gpu) => top + gpu * laneHeight + Math.floor(gpu / perNode) * nodeGap;
    const height = y(lanes.length - 1) + laneHeight + 8;
    ui.timeline.replaceChildren(ui.timeline.querySelector("title"));
    ui.timeline.setAttribute("viewBox", `0 0 ${width} ${height}`);
    ui.timeline.setAttribute("width", width);
    ui.timeline.setAttribute("height", height);
    state.x = x;
    // time axis: a tick every 5 or 10 ms
    const axis = svg("g", { class: "axis" }, ui.timeline);
    const stepMs = scaleEnd() * 1e3 > 80 ? 10 : 5;
    for (let tick = 0; tick <= scaleEnd() * 1e3 + 1e-9; tick += stepMs) {
      const tx = x(tick / 1e3);
      svg("line", { x1: tx, x2: tx, y1: top - 6, y2: height - 4, class: "grid" }, axis);
      svg("text", { x: tx, y: top - 10, "text-anchor": "middle" }, axis).textContent = `${tick} ms`;
    }
    state.rects = [];
    lanes.forEach((lane) => {
      const slow = lane.slowdown_phases.length > 0;
      const group = svg("g", { class: `lane${slow ? " straggler" : ""}`, "data-gpu": lane.gpu },
        ui.timeline);
      const label = svg("text", { x: 6, y: y(lane.gpu) + laneHeight / 2 + 4, class: "lane-label" },
        group);
      label.textContent = `${labels[lane.gpu]}${slow ? " ⚠" : ""}`;
      svg("title", {}, group).textContent =
        `${labels[lane.gpu]}: arrives at ${ms(lane.arrival_seconds)}, waits ${ms(lane.wait_seconds)}` +
        (slow ? ` (slow ${lane.slowdown_phases.join(", ")})` : "");
      const draw = (seg, offset, height, stream) => {
        const rect = svg("rect", {
          x: x(seg.start_seconds), y: y(lane.gpu) + offset, height, width: 0,
          class: `seg ph-${seg.phase}${stream ? " comm" : ""}`, "data-phase": seg.phase,
        }, group);
        if (stream) rect.setAttribute("data-stream", "comm");
        state.rects.push({ rect, start: seg.start_seconds, end: seg.end_seconds,
          full: x(seg.end_seconds) - x(seg.start_seconds) });
      };
      lane.segments.forEach((seg) => draw(seg, 2, computeHeight, false));
      // expert mode: the all-to-all spans of the second stream, a thin strip under the lane
      (lane.comm_segments || []).forEach((seg) => draw(seg, computeHeight + 4, 6, true));
    });
    const barrierX = x(current().barrier_seconds);
    state.barrier = svg("g", { class: "barrier", visibility: "hidden" }, ui.timeline);
    svg("line", { x1: barrierX, x2: barrierX, y1: top - 4, y2: height - 4 }, state.barrier);
    svg("text", { x: barrierX + 4, y: height - 8 }, state.barrier).textContent = "barrier";
    state.playhead = svg("line", { class: "playhead", x1: left, x2: left, y1: top - 6,
      y2: height - 4 }, ui.timeline);
  }

  function buildRing() {
    const data = state.data;
    const n = data.cluster.gpus;
    const perNode = data.cluster.gpus_per_node;
    const cx = 180, cy = 180, radius = 128;
    ui.ring.replaceChildren(ui.ring.querySelector("title"));
    state.ringPos = [];
    for (let i = 0; i < n; i += 1) {
      const angle = -Math.PI / 2 + (2 * Math.PI * i) / n;
      state.ringPos.push([cx + radius * Math.cos(angle), cy + radius * Math.sin(angle)]);
    }
    const hops = svg("g", { class: "hops" }, ui.ring);
    data.ring.hops.forEach((hop) => {
      const [x1, y1] = state.ringPos[hop.source];
      const [x2, y2] = state.ringPos[hop.target];
      const line = svg("line", { x1, y1, x2, y2, class: `hop hop-${hop.link}`,
        "data-link": hop.link }, hops);
      svg("title", {}, line).textContent =
        `${data.cluster.labels[hop.source]} → ${data.cluster.labels[hop.target]}: ` +
        (hop.link === "network" ? "InfiniBand" : "NVLink");
      if (hop.link === "network") {
        // label just outside the ring, on the hop's bisector
        const mx = (x1 + x2) / 2 - cx, my = (y1 + y2) / 2 - cy;
        const norm = Math.hypot(mx, my) || 1;
        svg("text", { x: cx + (mx / norm) * (radius + 30), y: cy + (my / norm) * (radius + 30) + 4,
          class: "hop-label", "text-anchor": "middle" }, ui.ring).textContent = "IB";
      }
    });
    const gpus = svg("g", { class: "ring-gpus" }, ui.ring);
    state.ringNodes = [];
    for (let i = 0; i < n; i += 1) {
      const [px, py] = state.ringPos[i];
      const node = Math.floor(i / perNode);
      const g = svg("g", { class: `ring-gpu node-${node % 2}` }, gpus);
      svg("circle", { cx: px, cy: py, r: 13 }, g);
      svg("text", { x: px, y: py + 4, "text-anchor": "middle" }, g).textContent = String(i);
      svg("title", {}, g).textContent = data.cluster.labels[i];
      state.ringNodes.push(g);
    }
    data.cluster.nodes.forEach((name, node) => {
      const members = state.ringPos.slice(node * perNode, (node + 1) * perNode);
      if (!members.length) return;
      const mx = members.reduce((s, p) => s + p[0], 0) / members.length;
      const my = members.reduce((s, p) => s + p[1], 0) / members.length;
      svg("text", { x: cx + (mx - cx) * 0.45, y: cy + (my - cy) * 0.45 + 4, class: "node-name",
        "text-anchor": "middle" }, ui.ring).textContent = name;
    });
    state.chunkLayer = svg("g", { class: "chunks" }, ui.ring);
  }

  function buildEvents() {
    const tl = current();
    const slow = tl.lanes.find((lane) => lane.slowdown_phases.length > 0);
    const healthy = tl.lanes.find((lane) => lane.slowdown_phases.length === 0) || tl.lanes[0];
    const times = new Set([0, tl.barrier_seconds, tl.step_seconds]);
    for (const lane of [healthy, slow].filter(Boolean)) {
      [...lane.segments, ...(lane.comm_segments || [])].forEach((seg) => {
        times.add(seg.start_seconds); times.add(seg.end_seconds);
      });
    }
    const perStep = state.data.allreduce.seconds_per_ring_step;
    for (let s = 1; s < state.data.allreduce.ring_steps; s += 1) {
      times.add(tl.barrier_seconds + s * perStep);
    }
    const sorted = [...times].filter((t) => t <= tl.step_seconds + 1e-12).sort((a, b) => a - b);
    state.events = sorted.filter((t, i) => i === 0 || t - sorted[i - 1] > 1e-6);
  }

  function summarize() {
    const tl = current();
    const waits = tl.lanes.filter((lane) => lane.slowdown_phases.length === 0)
      .map((lane) => lane.wait_seconds);
    const meanWait = waits.length ? waits.reduce((a, b) => a + b, 0) / waits.length : 0;
    $("sum-step").textContent = ms(tl.step_seconds);
    $("sum-ideal").textContent = ms(tl.ideal_step_seconds);
    $("sum-eff").textContent = pct(tl.efficiency);
    $("sum-wait").textContent =
      `${ms(meanWait)} (${pct(meanWait / tl.step_seconds)} of the step)`;
    $("sum-wait-ratio").textContent = pct(tl.barrier_wait_ratio);
    const ar = state.data.allreduce;
    $("sum-ar").textContent = `${ms(ar.seconds, 2)} (${(ar.message_bytes / 1e9).toFixed(2)} GB, ` +
      `${ar.ring_steps} ring steps, bus bandwidth ${(ar.bus_bandwidth_bytes_per_second / 1e9).toFixed(0)} GB/s)`;
    if (expert()) {
      const a2a = state.data.alltoall;
      $("sum-a2a").textContent = `${ms(tl.alltoall_seconds)} in all: ` +
        `${ms(tl.alltoall_hidden_seconds)} hidden (${pct(tl.alltoall_hidden_ratio)}), ` +
        `${ms(tl.alltoall_exposed_seconds)} exposed`;
      $("sum-a2a-model").textContent = `${ms(a2a.seconds_per_layer, 2)} ` +
        `(${(a2a.message_bytes / 1e6).toFixed(0)} MB, ${a2a.ranks} GPUs on ${a2a.nodes} ` +
        `node${a2a.nodes > 1 ? "s" : ""}, bus bandwidth ` +
        `${(a2a.bus_bandwidth_bytes_per_second / 1e9).toFixed(0)} GB/s, ` +
        `${a2a.overlapped ? "overlapped" : "not overlapped"})`;
      root.dataset.hiddenMs = (tl.alltoall_hidden_seconds * 1e3).toFixed(3);
      root.dataset.exposedMs = (tl.alltoall_exposed_seconds * 1e3).toFixed(3);
    }
    root.dataset.scenario = state.scenario;
  }

  // ---------------------------------------------------------------- drawing
  function render() {
    const t = state.t;
    const tl = current();
    for (const item of state.rects) {
      const fraction = item.end > item.start
        ? Math.min(1, Math.max(0, (t - item.start) / (item.end - item.start))) : (t >= item.end ? 1 : 0);
      item.rect.setAttribute("width", (item.full * fraction).toFixed(2));
    }
    const px = state.x(t);
    state.playhead.setAttribute("x1", px);
    state.playhead.setAttribute("x2", px);
    state.barrier.setAttribute("visibility", t >= tl.barrier_seconds - 1e-12 ? "visible" : "hidden");
    renderRing(t, tl);
    root.dataset.timeMs = (t * 1e3).toFixed(3);
    updateStatus(t, tl);
  }

  function ringStep(t, tl) {
    const ar = state.data.allreduce;
    if (t < tl.barrier_seconds || t >= tl.barrier_seconds + tl.allreduce_seconds || !ar.ring_steps) {
      return null;
    }
    const position = (t - tl.barrier_seconds) / ar.seconds_per_ring_step;
    const step = Math.min(ar.ring_steps - 1, Math.floor(position));
    return { step, fraction: position - step };
  }

  const within = (segs, t) => (segs || []).find((s) => t >= s.start_seconds && t < s.end_seconds);

  // expert mode: the GPUs whose second stream runs an all-to-all now, chords to their group
  function renderAllToAll(t, tl) {
    const data = state.data;
    const active = tl.lanes.filter((lane) => within(lane.comm_segments, t));
    state.ringNodes.forEach((node, gpu) => {
      node.classList.toggle("a2a-active", active.some((lane) => lane.gpu === gpu));
    });
    if (!active.length) return false;
    const perNode = data.cluster.gpus_per_node;
    for (let i = 0; i < active.length; i += 1) {
      for (let j = i + 1; j < active.length; j += 1) {
        const a = active[i], b = active[j];
        if (a.group !== b.group) continue;
        const link = Math.floor(a.gpu / perNode) === Math.floor(b.gpu / perNode) ? "nvlink" : "network";
        const [x1, y1] = state.ringPos[a.gpu];
        const [x2, y2] = state.ringPos[b.gpu];
        svg("line", { x1, y1, x2, y2, class: `a2a-chord a2a-${link}`, "data-link": link },
          state.chunkLayer);
      }
    }
    const lane = active[0];
    const index = lane.comm_segments.indexOf(within(lane.comm_segments, t));
    const layers = data.alltoall.layers;
    const pass = index < layers ? "forward" : "backward";
    ui.ringCaption.textContent = `Expert all-to-all, MoE layer ${(index % layers) + 1} of ` +
      `${layers} (${pass}): dispatch and combine among ${data.alltoall.ranks} GPUs on the ` +
      "second stream";
    return true;
  }

  function renderRing(t, tl) {
    const at = ringStep(t, tl);
    const data = state.data;
    const n = data.cluster.gpus;
    state.chunkLayer.replaceChildren();
    if (expert() && renderAllToAll(t, tl)) return;
    if (!at) {
      const before = t < tl.barrier_seconds;
      ui.ringCaption.textContent = before
        ? "Ring AllReduce: starts when the last GPU reaches the barrier"
        : "Ring AllReduce: done, every GPU holds the summed gradients";
      return;
    }
    const reduceSteps = data.ring.reduce_scatter_steps;
    const stage = at.step < reduceSteps ? "reduce-scatter" : "all-gather";
    const within = at.step < reduceSteps ? at.step + 1 : at.step - reduceSteps + 1;
    ui.ringCaption.textContent =
      `Ring AllReduce, ${stage} step ${within} of ${reduceSteps}: each GPU sends one chunk to the next`;
    // paused or reduced motion: chunks sit half-way along their hop, without moving
    const f = reducedMotion.matches || !state.playing ? 0.5 : at.fraction;
    const first = at.step * n;
    for (let k = first; k < first + n; k += 1) {
      const [, source, target, chunk] = data.ring.transfers[k];
      const [x1, y1] = state.ringPos[source];
      const [x2, y2] = state.ringPos[target];
      const link = data.ring.hops[source].link;
      const dot = svg("circle", {
        cx: x1 + (x2 - x1) * f, cy: y1 + (y2 - y1) * f, r: 5,
        class: `chunk chunk-${link}`, "data-link": link,
        fill: `hsl(${Math.round((chunk * 360) / n)} 70% 45%)`,
      }, state.chunkLayer);
      svg("title", {}, dot).textContent = `chunk ${chunk}: GPU ${source} → GPU ${target}`;
    }
  }

  function updateStatus(t, tl) {
    const labels = state.data.cluster.labels;
    const phaseAt = (lane) => {
      const seg = lane.segments.find((s) => t >= s.start_seconds && t < s.end_seconds);
      return seg ? PHASE_NAMES[seg.phase] || seg.phase : "done";
    };
    const slow = tl.lanes.find((lane) => lane.slowdown_phases.length > 0);
    const healthy = tl.lanes.find((lane) => lane.slowdown_phases.length === 0) || tl.lanes[0];
    const stream = (lane) => {
      if (!expert() || !within(lane.comm_segments, t)) return "";
      const seg = within(lane.segments, t);
      return seg && seg.phase === "alltoall_exposed" ? "" : ", all-to-all hidden on stream 2";
    };
    let text;
    if (t >= tl.step_seconds - 1e-12) {
      text = `Step done in ${ms(tl.step_seconds)}; efficiency ${pct(tl.efficiency)}.`;
    } else {
      text = `${labels[healthy.gpu]}: ${phaseAt(healthy)}${stream(healthy)}`;
      if (slow) text += ` · straggler ${labels[slow.gpu]}: ${phaseAt(slow)}${stream(slow)}`;
      const at = ringStep(t, tl);
      if (at) text += ` · ring step ${at.step + 1} of ${state.data.allreduce.ring_steps}`;
    }
    if (text !== state.lastStatus) {
      state.lastStatus = text;
      ui.status.textContent = text;
    }
  }

  // ---------------------------------------------------------------- playback
  function seek(t) {
    state.t = Math.min(Math.max(0, t), endTime());
    render();
    if (!state.playing) root.dataset.state = state.t >= endTime() ? "ended" : "paused";
  }

  function frame(now) {
    if (!state.playing) return;
    const dtReal = state.last === null ? 0 : (now - state.last) / 1000;
    state.last = now;
    const tl = current();
    const inAllReduce = state.t >= tl.barrier_seconds
      && state.t < tl.barrier_seconds + tl.allreduce_seconds;
    const perMs = Number(ui.speed.value); // real seconds per step millisecond
    const advance = (dtReal / perMs) * 1e-3 / (inAllReduce ? SLOW_MOTION : 1);
    const next = state.t + advance;
    if (next >= endTime()) {
      state.t = endTime();
      render();
      pause();
      root.dataset.state = "ended";
      return;
    }
    state.t = next;
    render();
    state.raf = requestAnimationFrame(frame);
  }

  function play() {
    if (!state.data) return;
    if (state.t >= endTime()) seek(0);
    if (reducedMotion.matches) {
      // no continuous motion: one event per press
      stepBy(1);
      return;
    }
    state.playing = true;
    state.last = null;
    root.dataset.state = "playing";
    ui.play.textContent = "Pause";
    ui.play.setAttribute("aria-pressed", "true");
    cancelAnimationFrame(state.raf);
    state.raf = requestAnimationFrame(frame);
  }

  function pause() {
    state.playing = false;
    cancelAnimationFrame(state.raf);
    ui.play.textContent = "Play";
    ui.play.setAttribute("aria-pressed", "false");
    if (state.data) root.dataset.state = state.t >= endTime() ? "ended" : "paused";
  }

  function toggle() {
    if (state.playing) pause(); else play();
  }

  function stepBy(direction) {
    if (!state.data) return;
    pause();
    const events = state.events;
    const eps = 1e-9;
    const target = direction > 0
      ? events.find((t) => t > state.t + eps)
      : [...events].reverse().find((t) => t < state.t - eps);
    seek(target === undefined ? (direction > 0 ? endTime() : 0) : target);
  }

  function replay() {
    if (!state.data) return;
    seek(0);
    if (reducedMotion.matches) pause(); else play();
  }

  function setScenario(withStraggler) {
    if (!state.data) return;
    state.scenario = withStraggler ? "straggler" : "healthy";
    const t = Math.min(state.t, endTime());
    const wasPlaying = state.playing;
    build();
    seek(t);
    if (wasPlaying) play();
  }

  // ---------------------------------------------------------------- wiring
  ui.play.addEventListener("click", toggle);
  ui.back.addEventListener("click", () => stepBy(-1));
  ui.forward.addEventListener("click", () => stepBy(1));
  ui.replay.addEventListener("click", replay);
  ui.stragglerOn.addEventListener("change", () => setScenario(ui.stragglerOn.checked));
  function setMode(mode) {
    state.mode = mode === "expert" ? "expert" : "data";
    ui.mode.setAttribute("aria-pressed", expert() ? "true" : "false");
    const url = new URL(window.location.href);
    if (expert()) url.searchParams.set("mode", "expert"); else url.searchParams.delete("mode");
    window.history.replaceState(null, "", url);
    pause();
    load();
  }
  ui.mode.addEventListener("click", () => setMode(expert() ? "data" : "expert"));
  ui.overlapOn.addEventListener("change", () => { if (expert()) { pause(); load(); } });
  ui.stragglerGpu.addEventListener("change", () => {
    ui.stragglerOn.checked = true;
    state.scenario = "straggler";
    pause();
    load();
  });
  document.addEventListener("keydown", (event) => {
    if (event.altKey || event.ctrlKey || event.metaKey) return;
    const tag = event.target && event.target.tagName;
    const inField = tag === "SELECT" || tag === "INPUT" || tag === "TEXTAREA";
    const onButton = tag === "BUTTON";
    const key = event.key;
    if ((key === " " || key === "k" || key === "K") && !inField && !onButton) {
      event.preventDefault();
      toggle();
    } else if ((key === "ArrowRight" || key === "l" || key === "L") && !inField) {
      event.preventDefault();
      stepBy(1);
    } else if ((key === "ArrowLeft" || key === "j" || key === "J") && !inField) {
      event.preventDefault();
      stepBy(-1);
    } else if ((key === "r" || key === "R" || key === "Home") && !inField) {
      event.preventDefault();
      replay();
    } else if ((key === "e" || key === "E") && !inField) {
      event.preventDefault();
      setMode(expert() ? "data" : "expert");
    } else if ((key === "o" || key === "O") && !inField && expert()) {
      event.preventDefault();
      ui.overlapOn.checked = !ui.overlapOn.checked;
      pause();
      load();
    } else if ((key === "s" || key === "S") && !inField) {
      event.preventDefault();
      ui.stragglerOn.checked = !ui.stragglerOn.checked;
      setScenario(ui.stragglerOn.checked);
    }
  });
  reducedMotion.addEventListener("change", () => { if (reducedMotion.matches) pause(); });
  let resizeTimer = 0;
  window.addEventListener("resize", () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => { if (state.data) { buildTimeline(); render(); } }, 150);
  });
  load();
})();
