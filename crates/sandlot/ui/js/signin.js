// Sign in with an API key: checked against the API, then kept in this tab's sessionStorage.
import * as api from './api.js'
import { h, on, replace } from './dom.js'

export function render(main, { message, next }) {
  const input = h('input', {
    type: 'password', id: 'key', name: 'key', autocomplete: 'off', spellcheck: 'false',
    placeholder: 'sl_…', required: true, autofocus: true,
  })
  const error = h('p', { class: 'error', id: 'signin-error', role: 'alert' }, message || '')
  const button = h('button', { type: 'submit', class: 'primary' }, 'Sign in')
  const form = h('form', { class: 'signin card', novalidate: true },
    h('h1', {}, 'Sign in to sandlot'),
    h('p', { class: 'muted' }, 'Paste an API key. It stays in this browser tab only (session storage) and is sent as an Authorization header; closing the tab forgets it.'),
    h('label', { for: 'key' }, 'API key'),
    input,
    error,
    button,
    h('p', { class: 'hint muted' }, 'The admin key is in ', h('code', {}, '<state-dir>/admin.key'), '; make tenant keys with ', h('code', {}, 'sandlot keys create --tenant NAME'), '.'),
  )
  on(form, 'submit', async (e) => {
    e.preventDefault()
    const k = input.value.trim()
    if (!k) {
      replace(error, 'Enter an API key.')
      return
    }
    button.disabled = true
    replace(error)
    try {
      await api.get('/v1/usage', { key: k })
      api.setKey(k)
      location.hash = next && next !== '#/signin' ? next : '#/'
      if (location.hash === (next || '#/')) window.dispatchEvent(new HashChangeEvent('hashchange'))
    } catch (err) {
      replace(error, err.status === 401 ? 'That key was not accepted: ' + err.message : 'Could not sign in: ' + err.message)
      button.disabled = false
    }
  })
  replace(main, h('div', { class: 'center' }, form))
  input.focus()
  return null
}
