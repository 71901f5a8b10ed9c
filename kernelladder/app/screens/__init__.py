"""The app's screens (modal dialogs are in app/modals/)."""
