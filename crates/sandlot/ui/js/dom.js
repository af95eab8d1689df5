// Building DOM without HTML parsing. Every string given here becomes a text node or an attribute
// value: nothing a sandbox wrote (file names, command output, metadata, image names, audit details)
// is ever parsed as markup. There is no way to pass HTML through this module, by design
// (docs/SECURITY.md, "The dashboard").

// Attributes that would run code or load something when set from data.
const REFUSED = /^(on|style$|srcdoc$|formaction$)/i
const URL_ATTRS = new Set(['href', 'src', 'action', 'xlink:href'])

// h('a', {href: '#/x', class: 'link'}, 'text', child, ...) → element.
// Children: strings and numbers become text nodes, null/undefined/false are skipped, arrays are flattened.
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag)
  setAttrs(el, attrs)
  append(el, children)
  return el
}

// The same in the SVG namespace (charts).
export function svg(tag, attrs, ...children) {
  const el = document.createElementNS('http://www.w3.org/2000/svg', tag)
  setAttrs(el, attrs)
  append(el, children)
  return el
}

function setAttrs(el, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue
    if (REFUSED.test(k)) throw new Error(`dom.js: attribute ${k} is not set from data`)
    if (URL_ATTRS.has(k) && !safeUrl(String(v))) throw new Error(`dom.js: refused URL ${v}`)
    el.setAttribute(k, v === true ? '' : String(v))
  }
}

// Only in-app links (hash routes), same-origin paths and blob: downloads.
function safeUrl(u) {
  return u.startsWith('#') || (u.startsWith('/') && !u.startsWith('//')) || u.startsWith('blob:')
}

export function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue
    el.append(c instanceof Node ? c : document.createTextNode(String(c)))
  }
  return el
}

// Replaces an element's children.
export function replace(el, ...children) {
  el.replaceChildren()
  return append(el, children)
}

// Adds an event listener and returns the element (for use inside h(...) trees).
export function on(el, type, fn) {
  el.addEventListener(type, fn)
  return el
}
