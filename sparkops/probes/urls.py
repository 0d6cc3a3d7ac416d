from . import views

app_name = "probes"
urlpatterns = views.PAGES.urls()
