// The dashboard's entry point: hash routes to pages, the signed-in header, sign-out.
import * as api from './api.js'
import { h, replace } from './dom.js'
import * as signin from './signin.js'
import * as list from './list.js'
import * as sandbox from './sandbox.js'
import * as audit from './audit.js'
import * as images from './images.js'

const main = document.getElementById('main')
let cleanup = null
let signinMessage = null

// '#/sandboxes/sb_x?tab=files' → {parts: ['sandboxes', 'sb_x'], query: URLSearchParams}
function parseHash() {
  const hash = location.hash.replace(/^#\/?/, '')
  const [path, query] = hash.split('?', 2)
  return { parts: path.split('/').filter(Boolean).map(decodeURIComponent), query: new URLSearchParams(query || '') }
}

async function route() {
  if (cleanup) {
    cleanup()
    cleanup = null
  }
  const { parts, query } = parseHash()
  const signedIn = !!api.key()
  document.getElementById('nav').hidden = !signedIn
  document.getElementById('who').hidden = !signedIn
  if (signedIn && parts[0] === 'signin') {
    location.hash = '#/'
    return
  }
  if (!signedIn) {
    document.title = 'Sign in · sandlot'
    cleanup = signin.render(main, { message: signinMessage, next: parts[0] === 'signin' ? '' : location.hash })
    signinMessage = null
    return
  }
  let page = 'sandboxes'
  if (parts[0] === 'sandboxes' && parts[1]) {
    cleanup = sandbox.render(main, { id: parts[1], query })
  } else if (parts[0] === 'audit') {
    page = 'audit'
    cleanup = audit.render(main, { query })
  } else if (parts[0] === 'images') {
    page = 'images'
    cleanup = images.render(main, {})
  } else {
    cleanup = list.render(main, { query })
  }
  for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('active', a.dataset.route === page)
  showTenant()
}

let tenantShown = null
async function showTenant() {
  const k = api.key()
  if (tenantShown === k) return
  tenantShown = k
  try {
    const u = await api.get('/v1/usage')
    replace(document.getElementById('tenant'), 'tenant ', h('strong', {}, u.tenant))
  } catch {
    tenantShown = null
  }
}

document.getElementById('signout').addEventListener('click', () => {
  api.signOut()
  tenantShown = null
  replace(document.getElementById('tenant'))
  location.hash = '#/signin'
})

// A 401 anywhere: the key was revoked or expired. Back to sign-in, saying why.
window.addEventListener('sandlot:unauthenticated', (e) => {
  api.signOut()
  tenantShown = null
  signinMessage = 'Signed out: ' + e.detail
  if (location.hash === '#/signin') route()
  else location.hash = '#/signin'
})

window.addEventListener('hashchange', route)
route()
