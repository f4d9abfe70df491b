// Building DOM nodes from code: h() for HTML elements, s() for SVG. Text always goes in as text
// (never parsed as HTML), so nothing the API returns can inject markup.

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
}

function assign(el, attrs) {
  for (const [key, value] of Object.entries(attrs ?? {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === 'class') el.setAttribute('class', value);
    else if (key.startsWith('on') && typeof value === 'function') el.addEventListener(key.slice(2), value);
    else if (key === 'dataset') Object.assign(el.dataset, value);
    else if (key === 'value' || key === 'checked' || key === 'selected') el[key] = value;
    else el.setAttribute(key, value === true ? '' : value);
  }
}

// h('button', {class: 'x', onclick: f}, 'text', child, [more])
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  assign(el, attrs);
  append(el, children);
  return el;
}

export function s(tag, attrs, ...children) {
  const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
  assign(el, attrs);
  append(el, children);
  return el;
}

export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

let ids = 0;
// A page-unique id for label/for and aria-describedby.
export function uid(prefix = 'f') {
  ids += 1;
  return `${prefix}-${ids}`;
}
