/*
 * The Transactions page: reads the plugin's JSON API and renders it, refreshing on its own.
 *
 * Every value from the API reaches the DOM through textContent or a DOM property (never
 * innerHTML), so a transactional id such as "<script>" is shown as text. The page keeps
 * working inside the Airflow UI's sandboxed iframe: no window.confirm (blocked there), a
 * <dialog> asks before an abort instead.
 */
(function () {
  "use strict";

  var body = document.body;
  var BASE = body.dataset.base || "";
  var VIEW = body.dataset.view;
  var KEY = body.dataset.key || "";
  var REFRESH_MS = Math.max(parseInt(body.dataset.refreshMs, 10) || 5000, 1000);

  // -- DOM helpers ------------------------------------------------------------------------

  function $(id) { return document.getElementById(id); }

  /** el("td", {class: "num"}, "text", otherNode): children are text or nodes, never HTML. */
  function el(tag, attrs) {
    var node = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (name) {
        var value = attrs[name];
        if (value === null || value === undefined || value === false) return;
        if (name === "class") node.className = value;
        else if (name === "text") node.textContent = value;
        else node.setAttribute(name, value === true ? "" : String(value));
      });
    }
    for (var i = 2; i < arguments.length; i++) append(node, arguments[i]);
    return node;
  }

  function append(node, child) {
    if (child === null || child === undefined || child === false) return;
    if (Array.isArray(child)) { child.forEach(function (c) { append(node, c); }); return; }
    node.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }

  function link(href, text, cls) { return el("a", {href: href, class: cls || null}, text); }

  function emptyRow(tbody, columns, text) {
    tbody.replaceChildren(el("tr", {class: "empty"}, el("td", {colspan: columns}, text)));
  }

  // -- formatting -------------------------------------------------------------------------

  function num(n) { return n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"); }

  function bytes(n) {
    if (n === null || n === undefined) return "–";
    var units = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0, v = Number(n);
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return (i === 0 ? v.toFixed(0) : v.toFixed(v < 10 ? 1 : 0)) + " " + units[i];
  }

  function duration(ms) {
    if (ms === null || ms === undefined) return "–";
    var s = Math.max(0, Math.round(ms / 1000));
    if (s < 60) return s + "s";
    var m = Math.floor(s / 60);
    if (m < 60) return m + "m" + (s % 60 ? " " + (s % 60) + "s" : "");
    var h = Math.floor(m / 60);
    if (h < 48) return h + "h" + (m % 60 ? " " + (m % 60) + "m" : "");
    return Math.floor(h / 24) + "d" + (h % 24 ? " " + (h % 24) + "h" : "");
  }

  function pad(n) { return (n < 10 ? "0" : "") + n; }

  function time(ms) {
    if (ms === null || ms === undefined) return "–";
    var d = new Date(Number(ms));
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " +
      pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
  }

  function ago(ms, now) {
    if (ms === null || ms === undefined) return "–";
    return el("span", {title: time(ms)}, duration(now - ms) + " ago");
  }

  var STATE_CLASS = {
    Empty: "idle", Ongoing: "ongoing", PrepareCommit: "preparing", PrepareAbort: "preparing",
    PrepareEpochFence: "preparing", CompleteCommit: "committed", CompleteAbort: "aborted", Dead: "dead"
  };

  function stateBadge(state, hanging) {
    var badge = el("span", {class: "badge badge-" + (STATE_CLASS[state] || "idle"), "data-state": state}, state);
    if (!hanging) return badge;
    return el("span", {class: "badge-group"}, badge, el("span", {class: "badge badge-hanging"}, "hanging"));
  }

  function outcomeBadge(outcome) {
    if (!outcome) return el("span", {class: "muted"}, "–");
    var cls = {committed: "committed", aborted: "aborted", open: "ongoing"}[outcome] || "preparing";
    return el("span", {class: "outcome outcome-" + cls}, outcome);
  }

  /** "12s / 60s" with a bar; red past the timeout. */
  function ageMeter(age, timeout, hanging) {
    if (age === null || age === undefined) {
      return el("span", {class: "muted"}, "– / " + duration(timeout));
    }
    var bar = el("span", {class: "meter-fill"});
    bar.style.width = Math.min(100, timeout > 0 ? (100 * age) / timeout : 100) + "%";
    return el("span", {class: "meter" + (hanging ? " meter-over" : ""), title: "age " + duration(age) +
      " of a " + duration(timeout) + " timeout"},
      el("span", {class: "meter-text"}, duration(age) + " / " + duration(timeout)),
      el("span", {class: "meter-track"}, bar));
  }

  function enc(value) { return encodeURIComponent(value); }
  function txnHref(tid) { return BASE + "/transactions/" + enc(tid); }
  function topicHref(name) { return BASE + "/topics/" + enc(name); }
  function groupHref(name) { return BASE + "/groups/" + enc(name); }
  function tpLink(topic, partition) {
    return el("span", {class: "mono"}, link(topicHref(topic), topic), "-" + partition);
  }

  function dagTask(row) {
    if (!row.dag_id) return el("span", {class: "muted"}, "–");
    var dag = el("span", {class: "dag" + (row.dag_known ? "" : " dag-guess"),
      title: row.dag_known ? "DAG " + row.dag_id : "not a DAG known to Airflow (guessed from the id)"}, row.dag_id);
    var task = el("span", {class: "task"}, row.task_id || "–");
    var idx = row.map_index !== null && row.map_index !== undefined
      ? el("span", {class: "map-index", title: "map index"}, "[" + row.map_index + "]") : null;
    return el("span", {class: "dag-task"}, dag, el("span", {class: "sep"}, "/"), task, idx);
  }

  // -- API --------------------------------------------------------------------------------

  function ApiError(status, message) { this.status = status; this.message = message; }

  function api(path, options) {
    options = options || {};
    var headers = Object.assign({Accept: "application/json"}, options.headers || {});
    return fetch(BASE + "/api" + path, {
      method: options.method || "GET", headers: headers, body: options.body,
      credentials: "same-origin", cache: "no-store"
    }).then(function (response) {
      return response.json().catch(function () { return {}; }).then(function (data) {
        if (response.ok) return data;
        var detail = typeof data.detail === "string" ? data.detail : response.statusText;
        if (response.status === 401) detail = "Your Airflow session has expired: reload the page to sign in again.";
        throw new ApiError(response.status, detail);
      });
    });
  }

  function showError(message) {
    var box = $("error");
    if (!message) { box.hidden = true; box.textContent = ""; return; }
    box.textContent = message;
    box.hidden = false;
  }

  function showNotice(message) {
    var box = $("notice");
    box.textContent = message;
    box.hidden = !message;
    if (message) setTimeout(function () { if (box.textContent === message) box.hidden = true; }, 8000);
  }

  // -- refresh loop -----------------------------------------------------------------------

  var paused = false, timer = null, inFlight = false;

  function refresh() {
    var view = VIEWS[VIEW];
    if (!view || inFlight) return Promise.resolve();
    inFlight = true;
    clearTimeout(timer);
    return view().then(function () {
      showError(null);
      $("updated").textContent = "Updated " + time(Date.now()).slice(11);
      $("live-dot").className = "live-dot" + (paused ? " paused" : " on");
    }).catch(function (error) {
      showError(error && error.message ? error.message : String(error));
      $("live-dot").className = "live-dot failed";
    }).then(function () {
      inFlight = false;
      schedule();
    });
  }

  function schedule() {
    clearTimeout(timer);
    if (!paused && !document.hidden && !NO_REFRESH[VIEW]) timer = setTimeout(refresh, REFRESH_MS);
  }

  $("pause").addEventListener("click", function () {
    paused = !paused;
    this.textContent = paused ? "Resume" : "Pause";
    this.setAttribute("aria-pressed", String(paused));
    $("live-dot").className = "live-dot" + (paused ? " paused" : " on");
    if (paused) clearTimeout(timer); else refresh();
  });
  document.addEventListener("visibilitychange", function () { if (!document.hidden && !paused) refresh(); });

  // -- Transactions list ------------------------------------------------------------------

  var filters = {state: "", q: "", dag_id: ""};

  function readFiltersFromUrl() {
    var params = new URLSearchParams(location.search);
    filters.state = params.get("state") || (params.get("hanging") === "true" ? "hanging" : "");
    filters.q = params.get("q") || "";
    filters.dag_id = params.get("dag_id") || "";
  }

  function filterQuery() {
    var params = new URLSearchParams();
    if (filters.state === "hanging") params.set("hanging", "true");
    else if (filters.state === "open") OPEN_STATES.forEach(function (s) { params.append("state", s); });
    else if (filters.state) params.set("state", filters.state);
    if (filters.q) params.set("q", filters.q);
    if (filters.dag_id) params.set("dag_id", filters.dag_id);
    return params.toString();
  }

  // the open states, from the API (GET /states): the broker is their one home
  var OPEN_STATES = [];

  function setupFilters(sets) {
    OPEN_STATES = sets.open;
    readFiltersFromUrl();
    var form = $("filters"), state = $("filter-state"), q = $("filter-q"), dag = $("filter-dag");
    sets.listed.forEach(function (s) { state.appendChild(el("option", {value: s}, s)); });
    state.value = filters.state;
    q.value = filters.q;
    if (filters.dag_id) dag.appendChild(el("option", {value: filters.dag_id}, filters.dag_id));
    dag.value = filters.dag_id;
    var typing = null;
    function changed() {
      filters.state = state.value; filters.q = q.value.trim(); filters.dag_id = dag.value;
      var params = new URLSearchParams();
      if (filters.state) params.set("state", filters.state);
      if (filters.q) params.set("q", filters.q);
      if (filters.dag_id) params.set("dag_id", filters.dag_id);
      var search = params.toString();
      history.replaceState(null, "", location.pathname + (search ? "?" + search : ""));
      refresh();
    }
    state.addEventListener("change", changed);
    dag.addEventListener("change", changed);
    q.addEventListener("input", function () { clearTimeout(typing); typing = setTimeout(changed, 250); });
    form.addEventListener("submit", function (e) { e.preventDefault(); changed(); });
    form.addEventListener("reset", function () { setTimeout(changed, 0); });
  }

  function updateDagOptions(dagIds) {
    var select = $("filter-dag"), current = select.value;
    var options = [el("option", {value: ""}, "All DAGs")];
    var ids = dagIds.slice();
    if (current && ids.indexOf(current) < 0) ids.push(current);
    ids.sort().forEach(function (d) { options.push(el("option", {value: d}, d)); });
    if (select.options.length !== options.length ||
        ids.some(function (d, i) { return select.options[i + 1].value !== d; })) {
      select.replaceChildren.apply(select, options);
      select.value = current;
    }
  }

  function loadTransactions() {
    var query = filterQuery();
    return api("/transactions" + (query ? "?" + query : "")).then(function (data) {
      updateDagOptions(data.dag_ids || []);
      $("count-total").textContent = num(data.total);
      $("count-open").textContent = num(data.open_count);
      $("count-hanging").textContent = num(data.hanging_count);
      $("counters").classList.toggle("has-hanging", data.hanging_count > 0);
      var tbody = $("transactions-body");
      if (!data.transactions.length) {
        emptyRow(tbody, 10, filters.state || filters.q || filters.dag_id
          ? "No transaction matches these filters." : "No transactional id yet.");
      } else {
        tbody.replaceChildren.apply(tbody, data.transactions.map(function (t) {
          return el("tr", {class: t.hanging ? "row-hanging" : (t.open ? "row-open" : null),
            "data-transactional-id": t.transactional_id},
            el("td", {class: "mono id-cell"}, link(txnHref(t.transactional_id), t.transactional_id)),
            el("td", null, dagTask(t)),
            el("td", null, stateBadge(t.state, t.hanging)),
            el("td", {class: "num"}, num(t.producer_epoch)),
            el("td", null, ageMeter(t.age_ms, t.timeout_ms, t.hanging)),
            el("td", {class: "num"}, num(t.partition_count)),
            el("td", {class: "num"}, num(t.record_count)),
            el("td", {class: "num"}, bytes(t.size_bytes)),
            el("td", null, outcomeBadge(t.outcome)),
            el("td", {class: "nowrap"}, ago(t.last_update_ms, data.now_ms)));
        }));
      }
      var note = $("truncated");
      note.hidden = !data.truncated;
      note.textContent = data.truncated ? "Showing the first " + data.transactions.length + " of " +
        num(data.total) + " transactional ids: narrow the filters to see the others." : "";
    });
  }

  // -- Transaction detail -----------------------------------------------------------------

  var current = null;

  function fact(label, value, cls) {
    return el("div", {class: "fact" + (cls ? " " + cls : "")}, el("div", {class: "fact-label"}, label),
      el("div", {class: "fact-value"}, value));
  }

  function renderTransaction(t) {
    current = t;
    $("detail").hidden = false;
    $("subtitle").replaceChildren(stateBadge(t.state, t.hanging), " ", dagTask(t));
    $("facts").replaceChildren(
      fact("State", stateBadge(t.state, t.hanging)),
      fact("Outcome", outcomeBadge(t.outcome)),
      fact("Producer id / epoch", num(t.producer_id) + " / " + num(t.producer_epoch)),
      fact("Age / timeout", ageMeter(t.age_ms, t.timeout_ms, t.hanging), t.hanging ? "fact-danger" : null),
      fact("Transaction", t.txn_id === null ? "–" : "#" + t.txn_id),
      fact("Started", time(t.start_ms)),
      fact(t.open ? "Last update" : "Ended", time(t.open ? t.last_update_ms : (t.end_ms || t.last_update_ms))),
      fact("Partitions", num(t.partitions.length)),
      fact("Records", num(t.record_count)),
      fact("Bytes", bytes(t.size_bytes)));

    var abort = $("abort"), note = $("abort-note");
    abort.hidden = !t.open;
    abort.disabled = !t.can_abort;
    note.hidden = !t.open || t.can_abort;
    note.textContent = t.open && !t.can_abort ? "Aborting needs permission to edit " +
      (t.dag_known ? "DAG " + t.dag_id : "all DAGs") + "." : "";
    abort.title = t.can_abort ? "Abort the open transaction and fence its producer" : note.textContent;

    var previous = null;
    $("timeline").replaceChildren.apply($("timeline"), t.history.length ? t.history.map(function (h) {
      var gap = previous === null ? null : h.at_ms - previous;
      previous = h.at_ms;
      return el("li", {class: "tl-item tl-" + (STATE_CLASS[h.to_state] || "idle")},
        el("span", {class: "tl-dot"}),
        el("div", {class: "tl-body"},
          el("div", {class: "tl-head"}, el("span", {class: "tl-from"}, h.from_state), " → ",
            stateBadge(h.to_state, false), el("span", {class: "tl-time", title: time(h.at_ms)}, time(h.at_ms)),
            gap === null ? null : el("span", {class: "tl-gap"}, "+" + duration(gap))),
          el("div", {class: "tl-reason"}, h.reason || ""),
          el("div", {class: "tl-meta muted"}, "producer " + h.producer_id + " · epoch " + h.producer_epoch +
            (h.txn_id === null ? "" : " · txn #" + h.txn_id))));
    }) : [el("li", {class: "muted"}, "No state change recorded.")]);

    var parts = $("partitions");
    if (!t.partitions.length) emptyRow(parts, 6, "No partition in this transaction.");
    else parts.replaceChildren.apply(parts, t.partitions.map(function (p) {
      return el("tr", null, el("td", null, tpLink(p.topic, p.partition)),
        el("td", {class: "num"}, num(p.first_offset)), el("td", {class: "num"}, num(p.last_offset)),
        el("td", {class: "num"}, num(p.record_count)), el("td", {class: "num"}, bytes(p.size_bytes)),
        el("td", null, p.marker ? el("span", {class: "outcome outcome-" + (p.marker === "COMMIT" ? "committed" : "aborted")},
          p.marker + " @ " + num(p.marker_offset)) : el("span", {class: "muted"}, "none yet")));
    }));

    var offsets = $("group-offsets");
    if (!t.group_offsets.length) emptyRow(offsets, 3, "No group offsets sent.");
    else offsets.replaceChildren.apply(offsets, t.group_offsets.map(function (o) {
      return el("tr", null, el("td", {class: "mono"}, link(groupHref(o.group_id), o.group_id)),
        el("td", null, tpLink(o.topic, o.partition)), el("td", {class: "num"}, num(o.offset)));
    }));

    var segments = $("segments");
    if (!t.segments.length) emptyRow(segments, 5, "No segment written.");
    else segments.replaceChildren.apply(segments, t.segments.map(function (s) {
      return el("tr", null, el("td", null, tpLink(s.topic, s.partition)),
        el("td", {class: "num"}, num(s.base_offset)), el("td", {class: "num"}, num(s.record_count)),
        el("td", {class: "num"}, bytes(s.size_bytes)), el("td", {class: "mono small break"}, s.object_key));
    }));

    var instances = $("instances");
    if (!t.transactions.length) emptyRow(instances, 6, "No transaction yet.");
    else instances.replaceChildren.apply(instances, t.transactions.map(function (x) {
      return el("tr", {class: x.txn_id === t.txn_id ? "row-current" : null},
        el("td", {class: "num"}, "#" + x.txn_id),
        el("td", {class: "num"}, x.producer_id + " / " + x.producer_epoch),
        el("td", {class: "nowrap"}, time(x.start_ms)), el("td", {class: "nowrap"}, time(x.end_ms)),
        el("td", null, x.end_ms ? duration(x.end_ms - x.start_ms) : duration(t.now_ms - x.start_ms)),
        el("td", null, outcomeBadge(x.outcome)));
    }));
  }

  function loadTransaction() {
    return api("/transactions/" + enc(KEY)).then(renderTransaction);
  }

  function setupAbort() {
    var dialog = $("confirm-abort");
    $("abort").addEventListener("click", function () {
      if (!current || !current.can_abort) return;
      $("confirm-id").textContent = current.transactional_id;
      dialog.returnValue = "";
      dialog.showModal();
    });
    dialog.addEventListener("close", function () {
      if (dialog.returnValue !== "abort" || !current) return;
      var tid = current.transactional_id, button = $("abort");
      button.disabled = true;
      button.textContent = "Aborting…";
      api("/session").then(function (session) {
        var headers = {"Content-Type": "application/json"};
        headers[session.csrf_header] = session.csrf_token;
        return api("/transactions/" + enc(tid) + "/abort", {method: "POST", headers: headers, body: "{}"});
      }).then(function (result) {
        renderTransaction(Object.assign({can_abort: false}, result.transaction));
        showNotice("Transaction " + (result.txn_id === null ? "" : "#" + result.txn_id + " ") +
          "of " + tid + ": " + result.action + ". The producer is fenced (epoch " + result.producer_epoch + ").");
      }).catch(function (error) {
        showError("Abort failed: " + (error && error.message ? error.message : String(error)));
      }).then(function () {
        button.textContent = "Abort transaction";
        refresh();
      });
    });
  }

  // -- Task instance ----------------------------------------------------------------------

  function loadTaskInstance() {
    var params = new URLSearchParams({dag_id: body.dataset.dagId || "", task_id: body.dataset.taskId || ""});
    var index = body.dataset.mapIndex || "";
    if (/^\d+$/.test(index)) params.set("map_index", index);
    return api("/task-instance?" + params.toString()).then(function (r) {
      if (r.exists) { location.replace(txnHref(r.transactional_id)); return; }
      $("ti-status").textContent = "";
      $("ti-result").hidden = false;
      $("ti-message").replaceChildren("This task instance has no transaction under its default transactional id ",
        el("code", null, r.transactional_id),
        r.candidates.length ? ". Transactional ids of the same task:" : " (it may not use a transactional operator yet).");
      $("ti-candidates").replaceChildren.apply($("ti-candidates"), r.candidates.map(function (c) {
        return el("li", null, link(txnHref(c), c, "mono"));
      }));
    });
  }

  // -- DAG run: the committed-records events that started it ------------------------------

  function loadDagRun() {
    var dagId = body.dataset.dagId || "", runId = body.dataset.runId || "";
    var query = /^\{.*\}$/.test(runId) || !runId ? "" : "?run_id=" + enc(runId);
    return api("/dag-runs/" + enc(dagId) + "/events" + query).then(function (r) {
      var rows = [];
      r.runs.forEach(function (run) {
        var events = run.events.length ? run.events : [null];
        events.forEach(function (e, i) {
          rows.push(el("tr", {"data-run-id": run.run_id, "data-event-id": e && e.event_id ? e.event_id : null},
            el("td", {class: "mono"}, i === 0 ? run.run_id : ""), el("td", null, i === 0 ? run.state : ""),
            el("td", {class: "mono"}, e ? (e.event_id || (e.source ? "task " + e.source : "asset event")) : "none"),
            el("td", {class: "mono"}, e && e.group_id ? link(groupHref(e.group_id), e.group_id) : "–"),
            el("td", {class: "mono"}, e && e.ranges.length ? e.ranges.map(function (x, k) {
              return [k ? ", " : "", tpLink(x.topic, x.partition), " [" + x.start + ", " + x.end + ")"];
            }) : "–"),
            el("td", {class: "num"}, e ? num(e.offsets) : "–"),
            el("td", {class: "mono break"}, e ? e.asset_uri : "")));
        });
      });
      var tbody = $("run-events");
      if (!rows.length) emptyRow(tbody, 7, "No run yet.");
      else tbody.replaceChildren.apply(tbody, rows);
      var started = r.runs.filter(function (run) { return run.event_ids.length; }).length;
      $("run-summary").textContent = r.runs.length + " run(s), " + started + " started by committed-records events";
      $("run-transactions").replaceChildren.apply($("run-transactions"), r.transactional_ids.map(function (t, i) {
        return [i ? ", " : "", link(txnHref(t), t, "mono")];
      }));
    });
  }

  // -- Topics -----------------------------------------------------------------------------

  function lagBar(lag, total) {
    var fill = el("span", {class: "meter-fill"});
    fill.style.width = (total > 0 ? Math.min(100, (100 * lag) / total) : 0) + "%";
    return el("span", {class: "meter" + (lag > 0 ? " meter-warn" : "")},
      el("span", {class: "meter-text"}, lag > 0 ? num(lag) + " records" : "none"),
      el("span", {class: "meter-track"}, fill));
  }

  // a small horizontal bar chart, one bar per partition (inline SVG, built node by node)
  var SVG_NS = "http://www.w3.org/2000/svg";

  function svg(tag, attrs, text) {
    var node = document.createElementNS(SVG_NS, tag);
    Object.keys(attrs || {}).forEach(function (name) { node.setAttribute(name, String(attrs[name])); });
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function lagChart(box, rows, label, unit) {
    var max = rows.reduce(function (m, r) { return Math.max(m, r.value); }, 0);
    var barH = 14, gap = 6, labelW = 150, valueW = 110, width = 520, span = width - labelW - valueW;
    var chart = svg("svg", {class: "lag-chart", role: "img", "aria-label": label, width: width,
      height: rows.length * (barH + gap) + gap, viewBox: "0 0 " + width + " " + (rows.length * (barH + gap) + gap)});
    rows.forEach(function (r, i) {
      var y = gap + i * (barH + gap);
      var w = r.value > 0 && max > 0 ? Math.max(2, (span * r.value) / max) : 0;
      var bar = svg("rect", {x: labelW, y: y, width: w, height: barH, rx: 2,
        class: "lag-bar" + (r.value > 0 ? " lag-bar-warn" : "")});
      bar.appendChild(svg("title", null, r.name + ": " + num(r.value) + " " + unit));
      var row = svg("g", {"data-key": r.name, "data-value": r.value});
      row.appendChild(svg("text", {x: 0, y: y + barH - 3, class: "lag-chart-label"}, r.name));
      row.appendChild(svg("rect", {x: labelW, y: y, width: span, height: barH, rx: 2, class: "lag-track"}));
      row.appendChild(bar);
      row.appendChild(svg("text", {x: labelW + span + 8, y: y + barH - 3, class: "lag-chart-value"},
        num(r.value) + " " + unit));
      chart.appendChild(row);
    });
    box.replaceChildren(chart);
  }

  function seconds(s) { return s === null || s === undefined ? "–" : s > 0 ? duration(s * 1000) : "up to date"; }

  function icebergCell(i) {
    if (!i) return el("td", {class: "muted"}, "–");
    return el("td", {class: "nowrap" + (i.offsets_behind > 0 ? " warn" : ""), "data-field": "iceberg"},
      num(i.offsets_behind) + " offsets · " + seconds(i.seconds_behind));
  }

  function loadTopics() {
    return api("/topics").then(function (data) {
      var tbody = $("topics-body");
      if (!data.topics.length) { emptyRow(tbody, 9, "No topic yet."); return; }
      tbody.replaceChildren.apply(tbody, data.topics.map(function (t) {
        return el("tr", {class: t.lso_lag > 0 ? "row-open" : null, "data-topic": t.name},
          el("td", {class: "mono"}, link(topicHref(t.name), t.name)),
          el("td", {class: "num"}, num(t.partition_count)), el("td", {class: "num"}, num(t.records)),
          el("td", {class: "num"}, bytes(t.size_bytes)), el("td", {class: "num"}, num(t.segment_count)),
          el("td", {class: "num" + (t.lso_lag > 0 ? " warn" : "")}, num(t.lso_lag)),
          el("td", {class: "num"}, num(t.held_partitions)),
          t.iceberg ? icebergCell(t.iceberg) : el("td", {class: "muted"}, data.iceberg_error && "?" || "–"),
          el("td", {class: "nowrap"}, ago(t.created_ms, data.now_ms)));
      }));
    });
  }

  function loadTopic() {
    return api("/topics/" + enc(KEY)).then(function (t) {
      var totals = t.partitions.reduce(function (a, p) {
        a.records += p.records; a.bytes += p.size_bytes; a.lag += p.lso_lag; return a;
      }, {records: 0, bytes: 0, lag: 0});
      $("topic-summary").textContent = t.partitions.length + " partition(s) · " + num(totals.records) +
        " records · " + bytes(totals.bytes) + " · " + (totals.lag ? num(totals.lag) +
        " records above the last stable offsets" : "every last stable offset at its high watermark");
      var tbody = $("topic-partitions");
      tbody.replaceChildren.apply(tbody, t.partitions.map(function (p) {
        return el("tr", {"data-partition": p.partition, class: p.lso_lag > 0 ? "row-open" : null},
          el("td", {class: "num"}, num(p.partition)), el("td", {class: "num"}, num(p.log_start_offset)),
          el("td", {class: "num", "data-field": "high_watermark"}, num(p.high_watermark)),
          el("td", {class: "num strong", "data-field": "last_stable_offset"}, num(p.last_stable_offset)),
          el("td", {"data-field": "lso_lag"}, lagBar(p.lso_lag, p.high_watermark - p.log_start_offset)),
          el("td", {class: "num"}, num(p.segment_count)), el("td", {class: "num"}, bytes(p.size_bytes)),
          el("td", {class: "num", "data-field": "iceberg_published_offset"},
            p.iceberg ? num(p.iceberg.published_offset) : "–"),
          el("td", {class: "num" + (p.iceberg && p.iceberg.offsets_behind > 0 ? " warn" : ""),
            "data-field": "iceberg_offsets_behind"}, p.iceberg ? num(p.iceberg.offsets_behind) : "–"),
          el("td", {class: "nowrap", "data-field": "iceberg_seconds_behind",
            "data-seconds": p.iceberg ? p.iceberg.seconds_behind : ""}, p.iceberg ? seconds(p.iceberg.seconds_behind) : "–"));
      }));
      lagChart($("topic-lag-chart"), t.partitions.map(function (p) {
        return {name: KEY + "-" + p.partition, value: p.lso_lag};
      }), "Records above the last stable offset, per partition", "records");
      $("topic-iceberg").textContent = t.iceberg ? "Iceberg table " + t.iceberg.table + " · snapshot " +
        (t.iceberg.snapshot_id === null ? "none yet" : t.iceberg.snapshot_id) + " · " +
        (t.iceberg.seconds_behind > 0 ? seconds(t.iceberg.seconds_behind) + " behind" : "up to date") :
        t.iceberg_error ? "Iceberg table: the catalog could not be read (" + t.iceberg_error + ")" : "";
      var holders = $("topic-holders");
      if (!t.open_transactions.length) emptyRow(holders, 4, "None: nothing holds this topic's last stable offsets back.");
      else holders.replaceChildren.apply(holders, t.open_transactions.map(function (h) {
        return el("tr", {class: h.hanging ? "row-hanging" : null},
          el("td", {class: "mono"}, link(txnHref(h.transactional_id), h.transactional_id)),
          el("td", null, stateBadge(h.state, h.hanging)),
          el("td", null, ageMeter(h.age_ms, h.timeout_ms, h.hanging)),
          el("td", null, h.partitions.map(function (p, i) {
            return [i ? ", " : null, el("span", {class: "mono"}, KEY + "-" + p.partition),
              el("span", {class: "muted"}, " from " + num(p.first_offset))];
          })));
      }));
      var schema = $("topic-schema");
      schema.replaceChildren.apply(schema, t.schema.map(function (f) {
        return el("tr", null, el("td", {class: "mono"}, f.name), el("td", {class: "mono"}, f.type),
          el("td", null, f.nullable ? "yes" : "no"), el("td", {class: "num"}, f.id === null ? "–" : num(f.id)));
      }));
      $("topic-schema-version").textContent = "version " + t.schema_version;
      var versions = $("topic-schema-versions");
      versions.replaceChildren.apply(versions, t.schema_versions.map(function (v) {
        return el("tr", null, el("td", {class: "num"}, num(v.version)),
          el("td", {class: "nowrap"}, ago(v.created_ms, t.now_ms)), el("td", {class: "mono"}, v.created_by),
          el("td", {class: "mono small"}, v.columns.join(", ")));
      }));
      var config = $("topic-config");
      config.replaceChildren.apply(config, Object.keys(t.config).sort().map(function (k) {
        var v = t.config[k];
        return el("tr", null, el("td", {class: "mono"}, k), el("td", {class: "num"},
          typeof v !== "number" ? String(v) : v < 0 ? "unlimited" : num(v)));
      }));
    });
  }

  // -- Consumer groups --------------------------------------------------------------------

  function loadGroups() {
    return api("/groups").then(function (data) {
      var tbody = $("groups-body");
      if (!data.groups.length) { emptyRow(tbody, 7, "No consumer group has committed offsets yet."); return; }
      tbody.replaceChildren.apply(tbody, data.groups.map(function (g) {
        return el("tr", {"data-group": g.group_id},
          el("td", {class: "mono"}, link(groupHref(g.group_id), g.group_id)),
          el("td", null, g.topics.map(function (name, i) {
            return [i ? ", " : null, link(topicHref(name), name, "mono")];
          })),
          el("td", {class: "num"}, num(g.partition_count)),
          el("td", {class: "num" + (g.lag > 0 ? " warn" : "")}, num(g.lag)),
          el("td", {class: "num"}, num(g.lag_uncommitted)),
          el("td", {class: "nowrap", "data-field": "lag_seconds"}, seconds(g.lag_seconds)),
          el("td", {class: "nowrap"}, ago(g.last_commit_ms, data.now_ms)));
      }));
    });
  }

  function loadGroup() {
    return api("/groups/" + enc(KEY)).then(function (g) {
      $("group-summary").textContent = g.partitions.length + " partition(s) · total lag " + num(g.lag) + " records";
      var tbody = $("group-partitions");
      tbody.replaceChildren.apply(tbody, g.partitions.map(function (p) {
        return el("tr", {"data-tp": p.topic + "-" + p.partition}, el("td", null, tpLink(p.topic, p.partition)),
          el("td", {class: "num strong", "data-field": "committed_offset"}, num(p.committed_offset)),
          el("td", {class: "num", "data-field": "last_stable_offset"}, num(p.last_stable_offset)),
          el("td", {class: "num", "data-field": "high_watermark"}, num(p.high_watermark)),
          el("td", {class: "num" + (p.lag > 0 ? " warn" : ""), "data-field": "lag"}, num(p.lag)),
          el("td", {class: "num"}, num(p.lag_uncommitted)),
          el("td", {class: "nowrap", "data-field": "lag_seconds", "data-seconds": p.lag_seconds}, seconds(p.lag_seconds)),
          el("td", {class: "nowrap"}, ago(p.commit_ms, g.now_ms)));
      }));
      lagChart($("group-lag-chart"), g.partitions.map(function (p) {
        return {name: p.topic + "-" + p.partition, value: p.lag};
      }), "Lag per partition", "records");
    });
  }

  // -- start ------------------------------------------------------------------------------

  var VIEWS = {
    transactions: loadTransactions, transaction: loadTransaction, task_instance: loadTaskInstance,
    topics: loadTopics, topic: loadTopic, groups: loadGroups, group: loadGroup, dag_run: loadDagRun
  };
  var NO_REFRESH = {task_instance: true};

  api("/session").then(function (s) {
    $("broker-database").textContent = s.broker.database;
    $("broker-storage").textContent = s.broker.storage;
    $("broker-source").textContent = s.broker.source ? "(" + s.broker.source + ")" : "";
  }).catch(function () { /* the view's own request reports the error */ });

  if (VIEW === "transaction") setupAbort();
  if (VIEW === "transactions") {
    api("/states").catch(function () { return {open: [], listed: []}; })
      .then(setupFilters).then(refresh);
  } else {
    refresh();
  }
})();
