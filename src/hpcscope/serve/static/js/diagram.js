/* hpcscope explorable diagram: cards in place, modes, keyboard walk, live polling.
 *
 * The page works without this script (every element is a link to ?element=<id>, the mode
 * buttons submit a GET form). With it:
 *  - click, or Tab then Enter/Space, opens an element's card below the diagram (fetched from
 *    /diagram/card/<id>) without losing the keyboard position; Escape closes it;
 *  - Observe/Threats and Engineer/Decision-maker switch in place (URL kept in step);
 *  - live classes and texts are polled from /api/diagram/state every few seconds with an ETag
 *    (304 when nothing changed), paused while the tab is hidden; an open card's live values
 *    refresh with them, without re-announcing the whole card.
 */
(function () {
  "use strict";

  var page = document.getElementById("diagram-page");
  if (!page) { return; }
  var svg = document.getElementById("diagram-svg");
  var region = document.getElementById("diagram-card");
  var decisionPanel = document.getElementById("decision-panel");
  var summary = page.querySelector("[data-summary]");
  var updated = page.querySelector("[data-updated]");
  var zoom = page.dataset.zoomNode || "";
  var pollMs = Math.max(2, Number(page.dataset.pollSeconds) || 7) * 1000;
  var reduceMotion = window.matchMedia && window.matchMedia("(prefers-reduced-motion: reduce)").matches;
  var UI_CLASSES = ["selected", "pulse"];
  var placeholder = region.innerHTML;
  var openId = region.querySelector("[data-card]") ? region.querySelector("[data-card]").dataset.card : null;
  var etag = null;
  var timer = null;
  var cardRequest = 0;

  function elementNode(id) { return id ? document.getElementById(id) : null; }

  function updateUrl() {
    var url = new URL(window.location.href);
    url.searchParams.set("mode", page.dataset.mode);
    url.searchParams.set("reader", page.dataset.reader);
    if (openId) { url.searchParams.set("element", openId); } else { url.searchParams.delete("element"); }
    url.hash = "";
    window.history.replaceState(null, "", url.toString());
  }

  function press(selector, attribute, value) {
    page.querySelectorAll(selector).forEach(function (button) {
      button.setAttribute("aria-pressed", button.getAttribute(attribute) === value ? "true" : "false");
    });
    var field = page.querySelector('input[data-field="' + attribute.replace("data-set-", "") + '"]');
    if (field) { field.value = value; }
  }

  function setMode(mode) {
    page.dataset.mode = mode;
    press("[data-set-mode]", "data-set-mode", mode);
    updateUrl();
  }

  function loadDecision() {
    if (!decisionPanel || decisionPanel.dataset.loaded === "true") { return; }
    decisionPanel.dataset.loaded = "true";
    fetch(page.dataset.decisionUrl, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (response) { return response.ok ? response.text() : Promise.reject(response.status); })
      .then(function (html) { decisionPanel.innerHTML = html; })
      .catch(function () {
        decisionPanel.dataset.loaded = "false";
        decisionPanel.querySelector(".muted").textContent = "The cost figures could not be loaded; try again.";
      });
  }

  function setReader(reader) {
    page.dataset.reader = reader;
    press("[data-set-reader]", "data-set-reader", reader);
    if (reader === "decision") { loadDecision(); }
    updateUrl();
  }

  function markSelected(id) {
    svg.querySelectorAll(".selected").forEach(function (el) {
      el.classList.remove("selected");
      el.removeAttribute("aria-current");
    });
    var el = elementNode(id);
    if (el) {
      el.classList.add("selected");
      el.setAttribute("aria-current", "true");
    }
  }

  function cardUrl(id) {
    return page.dataset.cardUrl + encodeURIComponent(id) + (zoom ? "?node=" + encodeURIComponent(zoom) : "");
  }

  function fetchCard(id) {
    return fetch(cardUrl(id), { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (response) { return response.text(); });
  }

  function openCard(id, options) {
    options = options || {};
    openId = id;
    markSelected(id);
    var ticket = ++cardRequest;
    region.setAttribute("aria-busy", "true");
    return fetchCard(id).then(function (html) {
      if (ticket !== cardRequest) { return; }
      region.setAttribute("aria-live", "polite");
      region.innerHTML = html;
      region.dataset.cardOpen = id;
      region.removeAttribute("aria-busy");
      updateUrl();
      if (options.scroll) {
        region.scrollIntoView({ block: "nearest", behavior: reduceMotion ? "auto" : "smooth" });
      }
    }).catch(function () {
      region.removeAttribute("aria-busy");
      region.innerHTML = '<p class="error" id="card-heading">The card could not be loaded; the server did not answer.</p>';
    });
  }

  function closeCard() {
    var was = openId;
    openId = null;
    cardRequest++;
    markSelected(null);
    region.innerHTML = placeholder;
    delete region.dataset.cardOpen;
    updateUrl();
    return was;
  }

  /* Live values of the open card, swapped quietly: the region is not re-announced. */
  function refreshCard() {
    if (!openId) { return; }
    var id = openId;
    var ticket = cardRequest;
    fetchCard(id).then(function (html) {
      if (id !== openId || ticket !== cardRequest) { return; }
      var fresh = document.createElement("div");
      fresh.innerHTML = html;
      var next = fresh.querySelector(".card-live");
      var current = region.querySelector(".card-live");
      if (!next || !current || next.innerHTML === current.innerHTML) { return; }
      region.setAttribute("aria-live", "off");
      current.innerHTML = next.innerHTML;
      window.setTimeout(function () { region.setAttribute("aria-live", "polite"); }, 50);
    }).catch(function () { /* the next poll tries again */ });
  }

  function apply(data) {
    var elements = data.elements || {};
    Object.keys(elements).forEach(function (id) {
      var el = document.getElementById(id);
      if (!el) { return; }
      var entry = elements[id];
      var keep = UI_CLASSES.filter(function (name) { return el.classList.contains(name); });
      var wanted = [el.dataset.baseClass || "", entry["class"] || ""].concat(keep).join(" ").trim();
      if (el.getAttribute("class") !== wanted) { el.setAttribute("class", wanted); }
      if (entry.label) {
        if (el.tagName.toLowerCase() === "rect") {
          var title = el.querySelector("title");
          if (title && title.textContent !== entry.label) { title.textContent = entry.label; }
        } else if (el.getAttribute("aria-label") !== entry.label) {
          el.setAttribute("aria-label", entry.label);
        }
      }
      (entry.lines || []).forEach(function (text, index) {
        var line = el.querySelector('[data-line="' + index + '"]');
        if (line && line.textContent !== text) { line.textContent = text; }
      });
    });
    if (summary && data.summary && summary.textContent !== data.summary) { summary.textContent = data.summary; }
    if (updated && data.generated_at) {
      updated.textContent = "· as of " + data.generated_at.slice(11, 19) + " UTC";
      page.classList.remove("live-paused");
    }
  }

  function poll() {
    if (document.hidden) { return Promise.resolve(); }
    var headers = { Accept: "application/json" };
    if (etag) { headers["If-None-Match"] = etag; }
    return fetch(page.dataset.stateUrl, { credentials: "same-origin", headers: headers, cache: "no-cache" })
      .then(function (response) {
        if (response.status === 304) {
          page.classList.remove("live-paused");
          return null;
        }
        if (!response.ok) { throw new Error("state " + response.status); }
        etag = response.headers.get("ETag");
        return response.json();
      })
      .then(function (data) {
        if (data) {
          apply(data);
          refreshCard();
        }
      })
      .catch(function () {
        page.classList.add("live-paused");
        if (updated) { updated.textContent = "· live updates paused: the server did not answer"; }
      });
  }

  function schedule() {
    window.clearTimeout(timer);
    if (document.hidden) { return; }
    timer = window.setTimeout(function () { poll().then(schedule); }, pollMs);
  }

  document.addEventListener("visibilitychange", function () {
    if (document.hidden) {
      window.clearTimeout(timer);
    } else {
      poll().then(schedule);
    }
  });

  /* Click: elements, cells, overlay pills, links inside cards, mode buttons, "Try this". */
  page.addEventListener("click", function (event) {
    if (event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey) { return; }
    var target = event.target;
    var mode = target.closest("[data-set-mode]");
    if (mode) { event.preventDefault(); setMode(mode.getAttribute("data-set-mode")); return; }
    var reader = target.closest("[data-set-reader]");
    if (reader) { event.preventDefault(); setReader(reader.getAttribute("data-set-reader")); return; }
    var close = target.closest("[data-close-card]");
    if (close) {
      event.preventDefault();
      var was = closeCard();
      var el = elementNode(was);
      if (el) { el.focus(); }
      return;
    }
    var inCard = target.closest("[data-open]");
    if (inCard) {
      event.preventDefault();
      var openTarget = inCard.getAttribute("data-open");
      openCard(openTarget).then(function () {
        var diagramEl = elementNode(openTarget);
        if (diagramEl && diagramEl.tagName.toLowerCase() === "a") { diagramEl.focus(); }
      });
      return;
    }
    var tryLink = target.closest("[data-try]");
    if (tryLink) {
      event.preventDefault();
      var kind = tryLink.getAttribute("data-try");
      var id = tryLink.getAttribute("data-target");
      if (kind === "vector") { setMode("threats"); }
      openCard(id, { scroll: false }).then(function () {
        var el = elementNode(id);
        if (el) {
          el.focus();
          el.scrollIntoView({ block: "center", inline: "center", behavior: reduceMotion ? "auto" : "smooth" });
        }
        var then = elementNode(tryLink.getAttribute("data-then"));
        if (then) {
          then.classList.add("pulse");
          window.setTimeout(function () { then.classList.remove("pulse"); }, 4000);
        }
      });
      return;
    }
    var shape = target.closest("[data-element]");
    if (shape && svg.contains(shape)) {
      event.preventDefault();
      openCard(shape.getAttribute("data-element"), { scroll: true });
    }
  });

  /* Keyboard: Enter or Space on a focused element opens its card; Escape closes it. */
  svg.addEventListener("keydown", function (event) {
    if (event.key !== "Enter" && event.key !== " " && event.key !== "Spacebar") { return; }
    var shape = event.target.closest("a[data-element]");
    if (!shape) { return; }
    event.preventDefault();
    openCard(shape.getAttribute("data-element"));
  });

  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape" || !openId) { return; }
    var was = closeCard();
    var el = elementNode(was);
    if (el && (region.contains(document.activeElement) || document.activeElement === document.body || document.activeElement === el)) {
      el.focus();
    }
  });

  /* Threats mode: focusing or hovering a vector dims the other vectors' badges. */
  function highlight(event) {
    var pill = event.target.closest && event.target.closest("[data-vector]");
    if (pill) { page.dataset.hl = pill.getAttribute("data-vector"); } else { delete page.dataset.hl; }
  }
  svg.addEventListener("focusin", highlight);
  svg.addEventListener("mouseover", highlight);
  svg.addEventListener("focusout", function () { delete page.dataset.hl; });
  svg.addEventListener("mouseleave", function () { delete page.dataset.hl; });

  if (openId) { markSelected(openId); }
  if (page.dataset.reader === "decision") { loadDecision(); }
  schedule();
})();
